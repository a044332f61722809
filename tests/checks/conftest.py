"""Each test starts with no recorded misses, so progressive hints begin at the first one."""

import pytest

from labkit.checks import work


@pytest.fixture(autouse=True)
def fresh_hints():
    work.reset_all()
    yield
    work.reset_all()
