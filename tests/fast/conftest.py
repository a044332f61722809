"""Fixtures for the tests of labkit.fast."""

import pytest

from labkit.fast.kernel import load_kernel


@pytest.fixture(scope="module")
def status():
    """labkit's kernel status; its tests skip where it is unavailable (test_kernel.py checks why, and
    overrides this fixture to insist on the kernel wherever a compiler is installed)."""
    status = load_kernel()
    if not status.available:
        pytest.skip(f"labkit's kernel is unavailable here (test_kernel.py checks why): {status.reason}")
    return status
