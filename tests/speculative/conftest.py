"""Fixtures of the speculative-decoding tests."""

import pytest


@pytest.fixture(autouse=True)
def _one_thread(request):
    """Tiny-model tests (all but the slow ones) run on one thread: see the `one_thread` fixture."""
    if not request.node.get_closest_marker("slow"):
        request.getfixturevalue("one_thread")
