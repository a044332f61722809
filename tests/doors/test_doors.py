"""Every case of the door tables (cases_<folder>.py) run: the bad call must raise the case's error, from
labkit's own code (its last frame in labkit/, not in torch, numpy, llguidance or a compiler), with a
message that holds the case's words. No process may start: a launcher refuses before it spawns one.
A case whose door is missing is an xfail(strict=True) that says where the call crashes today."""

import subprocess
import traceback
from pathlib import Path

import pytest
from cases import CASES
from door import Kit

LABKIT = Path(__file__).resolve().parents[2] / "labkit"


def param(case):
    marks = [pytest.mark.xfail(strict=True, reason=f"door missing: {case.missing}")] if case.missing else []
    return pytest.param(case, marks=marks + ([pytest.mark.slow] if case.slow else []), id=case.name[7:])


@pytest.fixture
def no_process_may_start(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"a process was started for an invalid call: {args[0] if args else kwargs}")

    monkeypatch.setattr(subprocess, "Popen", refuse)


def raised_in(error: BaseException) -> Path:
    """The file of the frame that raised error."""
    return Path(traceback.extract_tb(error.__traceback__)[-1].filename).resolve()


@pytest.mark.usefixtures("no_process_may_start", "one_thread")
@pytest.mark.parametrize("case", [param(case) for case in CASES])
def test_a_bad_call_is_refused_at_the_door(request, case):
    with pytest.raises(BaseException) as raised:
        case.call(Kit(request))
    error = raised.value
    assert isinstance(error, case.error), f"{case.name} raised {type(error).__name__}: {error}"
    assert raised_in(error).is_relative_to(LABKIT), (
        f"{case.name} failed deep inside, in {raised_in(error)}: {error}"
    )
    message = str(error.args[0] if isinstance(error, KeyError) and error.args else error)
    missing = [words for words in case.words if words not in message]
    assert not missing, f"{case.name}'s message lacks {missing}: {message}"
