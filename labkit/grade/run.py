"""Grading each submission in its own temporary folder and child process (labkit.grade.kernel).

>>> result = grade_submission(Path("submissions/ada/06_kv_cache.ipynb"), course_exercises(
...     "notebooks/06_kv_cache.ipynb"), time_limit_s=900)
>>> result.verdicts[0].status
'passed'
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from labkit.grade.exercises import Exercise, course_exercises
from labkit.grade.kernel import GRADING_BUDGET_S
from labkit.grade.report import write_report

START_MARGIN_S = 120.0  # the kernel's start and labkit's imports, beyond the notebook's and grading's time
# The child runs kernel.py as a file, not as `-m labkit.grade.kernel`: that would import the labkit package
# first (torch, transformers: about 6 s of CPU), which the child never uses; only the student's kernel does.
# -P: kernel.py's folder is not put on sys.path, so its neighbours (run.py, report.py) shadow no module.
KERNEL_SCRIPT = Path(__file__).with_name("kernel.py")


@dataclass(frozen=True)
class Verdict:
    """What the grader found for one exercise of one submission."""

    exercise: Exercise
    status: str  # "passed", "not yet", "not attempted" or "not graded"
    message: str  # the checker's words, or why it could not be graded


@dataclass(frozen=True)
class SubmissionResult:
    """One student's notebook, graded."""

    student: str
    notebook: str
    verdicts: list[Verdict]
    stopped: str | None  # what stopped the student's cells early, None when they all ran


def status_of(passed: bool, printed: str) -> str:
    if passed:
        return "passed"
    return "not attempted" if "Not attempted yet" in printed else "not yet"


def verdicts_from(exercises: list[Exercise], outcome: dict) -> list[Verdict]:
    """Each exercise's verdict from the kernel's results (None: nothing could be graded)."""
    results = outcome.get("results")
    if results is None:
        why = outcome.get("stopped") or "the notebook could not be run"
        return [Verdict(exercise, "not graded", why) for exercise in exercises]
    verdicts = []
    for exercise, (passed, printed, error) in zip(exercises, results, strict=True):
        if error is not None:
            verdicts.append(
                Verdict(
                    exercise,
                    "not graded",
                    f"its checker could not be called ({error}): was its cell run, "
                    f"and are its names as the notebook gives them?",
                )
            )
        else:
            verdicts.append(Verdict(exercise, status_of(passed, printed), printed.strip()))
    return verdicts


def run_child(notebook: Path, calls: list[str], time_limit_s: float, scratch: Path) -> dict:
    """The kernel's outcome, or a 'stopped' outcome when the child had to be killed or wrote nothing."""
    calls_path, result_path = scratch / "calls.json", scratch / "result.json"
    calls_path.write_text(json.dumps(calls), encoding="utf-8")
    command = [
        sys.executable,
        "-P",
        str(KERNEL_SCRIPT),
        str(notebook),
        str(calls_path),
        str(result_path),
        str(time_limit_s),
    ]
    child = subprocess.Popen(
        command,
        cwd=notebook.parent,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, errors = child.communicate(timeout=time_limit_s + GRADING_BUDGET_S + START_MARGIN_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        return {
            "stopped": f"the notebook did not end within {time_limit_s:.0f} s and was stopped",
            "results": None,
        }
    if not result_path.exists():
        last = (errors or "").strip().splitlines()[-1:] or ["no message"]
        return {"stopped": f"the grader's kernel failed ({last[0]})", "results": None}
    return json.loads(result_path.read_text(encoding="utf-8"))


def grade_submission(
    path: Path, exercises: list[Exercise], time_limit_s: float, student: str = ""
) -> SubmissionResult:
    """Run one submitted notebook in a temporary folder of its own and grade its exercises."""
    with tempfile.TemporaryDirectory(prefix="labkit-grade-") as folder:
        work, scratch = Path(folder) / "work", Path(folder) / "grader"
        work.mkdir()
        scratch.mkdir()
        copy = work / path.name
        shutil.copyfile(path, copy)
        outcome = run_child(copy, [exercise.call for exercise in exercises], time_limit_s, scratch)
    return SubmissionResult(
        student or path.parent.name, path.name, verdicts_from(exercises, outcome), outcome.get("stopped")
    )


def check_folders(submissions: Path, course: Path, out: Path) -> None:
    if not submissions.is_dir():
        raise ValueError(
            f"submissions must be a folder with one folder a student; {str(submissions)!r} is not a folder."
        )
    if not any(course.glob("[0-9][0-9]_*.ipynb")):
        raise ValueError(
            f"course must be the folder of the instructor's notebooks (NN_name.ipynb); none in {str(course)!r}."
        )
    if out.resolve() in (submissions.resolve(), course.resolve()):
        raise ValueError(
            f"out must be a folder of its own, not {str(out)!r}: it would mix grades with notebooks."
        )


def grade_class(
    submissions: str | Path,
    out: str | Path,
    course: str | Path = "notebooks",
    time_limit_s: float = 1200.0,
    progress=print,
) -> Path:
    """Grade every student's notebooks under `submissions` against the course's notebooks in `course`;
    writes out/grades.csv and out/feedback/<student>.md and returns the CSV's path."""
    submissions, course, out = Path(submissions), Path(course), Path(out)
    check_folders(submissions, course, out)
    if time_limit_s <= 0:
        raise ValueError(f"time_limit_s must be a positive number of seconds; got {time_limit_s!r}.")
    exercises = {path.name: course_exercises(path) for path in sorted(course.glob("[0-9][0-9]_*.ipynb"))}
    results, strays = [], {}
    for student in sorted(folder for folder in submissions.iterdir() if folder.is_dir()):
        for path in sorted(student.glob("*.ipynb")):
            if path.name not in exercises:
                strays.setdefault(student.name, []).append(path.name)
                continue
            progress(f"grading {student.name}/{path.name}")
            results.append(grade_submission(path, exercises[path.name], time_limit_s, student.name))
    return write_report(results, exercises, strays, out)
