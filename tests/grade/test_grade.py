"""The class grader (`python -m labkit.grade`) on four submissions of a two-exercise notebook: a correct one,
a partial one that deletes files, one that cheats (labkit's own answers, patched checkers, `passed = True`)
and one that hangs. Each runs in a real kernel of its own, as a class's would."""

import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from labkit.grade import grade_class
from labkit.grade.exercises import course_exercises

pytestmark = pytest.mark.slow  # five fresh kernels, each importing labkit.checks; about two minutes

SETUP = "from labkit import checks"
KV = "kv_bytes = {answer}  # your answer, in bytes\npassed = checks.check_kv_cache_bytes(kv_bytes)"
TOP_K = (
    "top_k = {answer}  # your code here: def top_k(logits, k): ...\npassed = checks.check_top_k_filter(top_k)"
)
RIGHT_TOP_K = (
    "def my_top_k(logits, k):\n"
    "    threshold = logits.topk(k, dim=-1).values[..., -1:]\n"
    '    return logits.masked_fill(logits < threshold, float("-inf"))\n'
)
NO_TIES_TOP_K = (  # keeps exactly k tokens: wrong where the k-th logit is tied
    "import torch\n\n"
    "def my_top_k(logits, k):\n"
    '    kept = torch.full_like(logits, float("-inf"))\n'
    "    index = logits.topk(k, dim=-1).indices\n"
    "    return kept.scatter(-1, index, logits.gather(-1, index))\n"
)
KV_RIGHT = "30 * 2 * 3 * 64 * 4096 * 8 * 2"  # layers x (keys, values) x KV heads x head size x tokens x batch x bytes
TIME_LIMIT_S = 40


def notebook(*cells: str) -> nbformat.NotebookNode:
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return book


def write(folder: Path, name: str, book: nbformat.NotebookNode) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(book, folder / name)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    course, submissions = root / "course", root / "submissions"
    name = "06_mini.ipynb"
    write(course, name, notebook(SETUP, KV.format(answer="None"), TOP_K.format(answer="None")))
    write(
        submissions / "ada",
        name,
        notebook(SETUP, KV.format(answer=KV_RIGHT), RIGHT_TOP_K, TOP_K.format(answer="my_top_k")),
    )
    write(
        submissions / "bo",
        name,
        notebook(
            SETUP,
            "import os\nfor entry in os.listdir('.'):\n    os.remove(entry)",
            KV.format(answer=KV_RIGHT),
            NO_TIES_TOP_K,
            TOP_K.format(answer="my_top_k"),
        ),
    )
    write(
        submissions / "cy",
        name,
        notebook(
            SETUP,
            # labkit's own answer, passed by a checker it replaced
            "from labkit.models.sizing import model_shape\n"
            "checks.check_kv_cache_bytes = lambda answer: True\n"
            + KV.format(answer='model_shape("smollm2-135m").kv_cache_bytes(4096, 8, "fp16")'),
            "from labkit.decoding.sampling import top_k_filter\n" + TOP_K.format(answer="top_k_filter"),
            "checks.check_top_k_filter = lambda function: True\npassed = True",
        ),
    )
    write(
        submissions / "dee",
        name,
        notebook(
            SETUP,
            KV.format(answer=KV_RIGHT),
            "import time\ntime.sleep(10_000)",
            RIGHT_TOP_K,
            TOP_K.format(answer="my_top_k"),
        ),
    )
    (submissions / "dee" / "notes.ipynb").write_text("{}")  # not a course notebook
    csv_path = grade_class(
        submissions, root / "grades", course, time_limit_s=TIME_LIMIT_S, progress=lambda _: None
    )
    return root, csv_path


def scores(csv_path: Path) -> dict[str, dict[str, str]]:
    with csv_path.open(encoding="utf-8") as file:
        return {row.pop("student"): row for row in csv.DictReader(file)}


def test_each_submission_gets_the_grade_its_work_earns(graded):
    _, csv_path = graded
    got = scores(csv_path)
    kv, top_k = "06.1 check_kv_cache_bytes", "06.2 check_top_k_filter"
    assert {student: (row[kv], row[top_k], row["total"]) for student, row in got.items()} == {
        "ada": ("1", "1", "2"),  # correct
        "bo": ("1", "0", "1"),  # partial, and its deleted files were its own copy's
        "cy": ("0", "0", "0"),  # labkit's answers, patched checkers, passed = True: none counts
        "dee": ("1", "0", "1"),  # its first answer, before the cell that hangs
    }
    assert {row["out_of"] for row in got.values()} == {"2"}


def test_feedback_gives_hints_and_why_never_a_hidden_case(graded):
    root, _ = graded
    feedback = {
        path.stem: path.read_text(encoding="utf-8") for path in (root / "grades" / "feedback").glob("*.md")
    }
    assert set(feedback) == {"ada", "bo", "cy", "dee"}
    assert "2 of 2 exercises pass" in feedback["ada"] and "❌" not in feedback["ada"]
    assert "1 of 2 exercises pass" in feedback["bo"] and "tie" in feedback["bo"]  # the checker's hint on ties
    assert "calling labkit's version does not count" in feedback["cy"]
    assert "computed by labkit's own kv_cache_bytes" in feedback["cy"]
    assert "time limit" in feedback["dee"] and "notes.ipynb" in feedback["dee"]
    for student, text in feedback.items():
        quoted = re.findall(r"\[[-\d.,\s]*\d[-\d.,\s]*\]", text)
        assert not quoted, f"{student}'s feedback quotes a checker's own case: {quoted}"


def test_a_rerun_grades_the_same(graded, tmp_path):
    """Two of the students graded again, in another order of runs: the same rows."""
    root, csv_path = graded
    for student in ("cy", "ada"):
        shutil.copytree(root / "submissions" / student, tmp_path / "submissions" / student)
    again = grade_class(
        tmp_path / "submissions",
        tmp_path / "grades",
        root / "course",
        time_limit_s=TIME_LIMIT_S,
        progress=lambda _: None,
    )
    assert scores(again) == {student: scores(csv_path)[student] for student in ("ada", "cy")}


def test_the_grader_reads_the_courses_exercises_not_its_demonstrations():
    root = Path(__file__).resolve().parents[2] / "notebooks"
    exercises = [e for path in sorted(root.glob("[0-9][0-9]_*.ipynb")) for e in course_exercises(path)]
    assert len(exercises) >= 55 and len({e.column for e in exercises}) == len(exercises)
    demos = [e.call for e in exercises if "buggy" in e.call or "_v1" in e.call]
    assert not demos, f"a checker run on the notebook's own buggy version was taken for an exercise: {demos}"


def test_bad_folders_get_a_clear_error(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "labkit.grade", str(tmp_path / "missing")], capture_output=True, text=True
    )
    assert result.returncode != 0 and "one folder a student" in result.stderr
