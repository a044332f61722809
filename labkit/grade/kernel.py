"""One submission in a kernel of its own: the student's cells in order, then the grader's calls of the
course's checkers, in a child process that the grader can stop whatever the notebook does.

The child runs `python -P labkit/grade/kernel.py NOTEBOOK EXERCISES_JSON RESULT_JSON SECONDS` (the file, so
that the labkit package is not imported here: it imports nothing of labkit) in the submission's own
temporary folder (the kernel's working directory, so a notebook that deletes files deletes
its own copy). The student's cells share one time limit; a cell past it is interrupted and the rest skipped.
Then one grading cell reloads labkit.checks (a student's patch of a checker does not survive it) and
evaluates each exercise's call as the instructor wrote it, on the names the student's run defined, with
hints reset to their first level. Its output carries a nonce drawn after the student's cells ran, so
nothing a notebook prints can pass for it.

    $ python -P labkit/grade/kernel.py sub/06_kv_cache.ipynb exercises.json result.json 600
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

GRADING_BUDGET_S = 300.0  # for the grading cell, beyond the student's time limit
GRADING_CELL = """\
import contextlib as _grade_contextlib, importlib as _grade_importlib, io as _grade_io, json as _grade_json, sys as _grade_sys
for _grade_name in ["labkit.checks.common", "labkit.checks.work", *sorted(
        _grade_module for _grade_module in _grade_sys.modules
        if _grade_module.startswith("labkit.checks.") and _grade_module not in ("labkit.checks.common", "labkit.checks.work")),
        "labkit.checks"]:
    _grade_importlib.reload(_grade_importlib.import_module(_grade_name))
_grade_checks = _grade_sys.modules["labkit.checks"]
_grade_names = {{**globals(), "checks": _grade_checks,
                **{{_n: getattr(_grade_checks, _n) for _n in dir(_grade_checks) if _n.startswith("check_")}}}}
_grade_results = []
for _grade_call in {calls!r}:
    _grade_out = _grade_io.StringIO()
    try:
        with _grade_contextlib.redirect_stdout(_grade_out):
            _grade_passed = eval(_grade_call, _grade_names)
        _grade_results.append([_grade_passed is True, _grade_out.getvalue(), None])
    except Exception as _grade_error:
        _grade_results.append([False, _grade_out.getvalue(), f"{{type(_grade_error).__name__}}: {{_grade_error}}"])
print({marker!r} + _grade_json.dumps(_grade_results))
"""


def run_student_cells(client: NotebookClient, notebook, deadline: float) -> str | None:
    """Run the notebook's code cells in order until one passes `deadline` or kills the kernel; None when all
    ran (a cell that raises is recorded in its outputs and the next runs, as a student would go on), else
    what stopped them."""
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        client.timeout = allowed = max(1, int(deadline - time.monotonic()))
        started = time.monotonic()
        try:
            client.execute_cell(cell, index)  # past the timeout, the kernel is interrupted and this returns
        except DeadKernelError:
            return f"the kernel died in cell {index}; the cells after it did not run"
        if time.monotonic() - started >= allowed:
            return f"cell {index} was still running at the time limit and was stopped; the cells after it did not run"
    return None


def grading_output(cell) -> str:
    return "".join(
        output.get("text", "") for output in cell.get("outputs", []) if output.get("name") == "stdout"
    )


def grade_in_kernel(notebook_path: Path, calls: list[str], seconds: float) -> dict:
    """{"stopped": what stopped the student's cells or None, "results": [[passed, printed, error], ...] in the
    order of `calls`, or None when the grading cell did not report}."""
    notebook = nbformat.read(notebook_path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=int(seconds),
        allow_errors=True,
        interrupt_on_timeout=True,
        kernel_name="python3",
        resources={"metadata": {"path": str(notebook_path.parent)}},
    )
    with client.setup_kernel():
        stopped = run_student_cells(client, notebook, time.monotonic() + seconds)
        if stopped is not None and "kernel died" in stopped:
            return {"stopped": stopped, "results": None}
        marker = f"labkit-grade {secrets.token_hex(16)} "
        cell = nbformat.v4.new_code_cell(GRADING_CELL.format(calls=calls, marker=marker))
        notebook.cells.append(cell)
        client.timeout = int(GRADING_BUDGET_S)
        try:
            client.execute_cell(cell, len(notebook.cells) - 1)
        except (CellTimeoutError, DeadKernelError) as error:
            return {"stopped": stopped or f"the grading cell failed: {type(error).__name__}", "results": None}
    lines = [line for line in grading_output(cell).splitlines() if line.startswith(marker)]
    results = json.loads(lines[-1][len(marker) :]) if lines else None
    return {"stopped": stopped, "results": results}


if __name__ == "__main__":
    notebook_arg, calls_arg, result_arg, seconds_arg = sys.argv[1:5]
    calls = json.loads(Path(calls_arg).read_text(encoding="utf-8"))
    outcome = grade_in_kernel(Path(notebook_arg), calls, float(seconds_arg))
    Path(result_arg).write_text(json.dumps(outcome), encoding="utf-8")
