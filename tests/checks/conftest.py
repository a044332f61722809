"""Each test starts with no recorded misses, so progressive hints begin at the first one, and with an empty run
log, so a number or a result is a measurement only where the test says it was (`timed`)."""

from collections import deque

import numpy as np
import pytest
import torch

from labkit import run_log
from labkit.checks import work


@pytest.fixture(autouse=True)
def fresh_hints():
    work.reset_all()
    yield
    work.reset_all()


@pytest.fixture(autouse=True)
def timed(monkeypatch):
    """timed(*values): the numbers, or result objects, a test passes as if labkit had measured them in this
    kernel; returns the last one."""
    monkeypatch.setattr(run_log, "_log", deque(maxlen=run_log.LOG_SIZE))
    monkeypatch.setattr(run_log, "_results", deque(maxlen=run_log.RESULTS_SIZE))

    def timed(*values):
        for value in values:
            if isinstance(value, (int, float)):
                run_log.record([value])
            else:
                run_log.record_result(value)
        return values[-1] if values else None

    return timed


@pytest.fixture
def as_measured(timed):
    """as_measured(*args): every number, list or dict of numbers, and result object among args recorded as
    measured, as the notebook's own run would have logged them (a StepCosts with its measured_seconds);
    returns args. For tests about something else than the run log."""

    def walk(value):
        if value is None or isinstance(value, (bool, str, torch.Tensor, torch.nn.Module, np.ndarray)):
            return
        if isinstance(value, (int, float)):
            timed(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        else:
            timed(value)
            if isinstance(getattr(value, "measured_seconds", None), float):
                timed(value.measured_seconds)

    def as_measured(*args):
        walk(args)
        return args

    return as_measured
