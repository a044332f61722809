"""Each test starts with no recorded misses, so progressive hints begin at the first one, and with an empty run
log, so a number is a measurement only where the test says it was (`timed`)."""

from collections import deque

import pytest

from labkit import run_log
from labkit.checks import work


@pytest.fixture(autouse=True)
def fresh_hints():
    work.reset_all()
    yield
    work.reset_all()


@pytest.fixture(autouse=True)
def timed(monkeypatch):
    """timed(*values): the numbers a test passes as if labkit's timing had measured them in this kernel."""
    monkeypatch.setattr(run_log, "_log", deque(maxlen=run_log.LOG_SIZE))
    return lambda *values: run_log.record(values)
