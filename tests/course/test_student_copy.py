"""The learner's copy: what `make lab` opens shows no answer, no saved reveal and no instructor note, keeps a
student's own work when the notebooks change, and never overwrites the instructor's copies."""

import json
import re
import shlex
from pathlib import Path

import pytest

from labkit.course.student import WRITTEN, write_student_copies

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# What must never reach a student copy, whatever its cell: a saved reveal or verdict, a worked solution,
# a note to the instructor.
GIVEAWAYS = {
    "a saved reveal": re.compile(r"measured \*\*|· measured |you predicted", re.I),
    "a checker's verdict": re.compile(r"✅ Correct|❌ Not yet"),
    "a worked solution": re.compile(r"BEGIN SOLUTION|#+ Worked solution", re.I),
    "an instructor note": re.compile(r'^\s*"Instructor:', re.M),
}


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("student")
    return {path.name: path.read_text(encoding="utf-8") for path in write_student_copies(NOTEBOOKS, out)}


def visible_text(notebook_text: str) -> str:
    """Every cell's source and saved outputs, as a student would see them (metadata left out)."""
    cells = json.loads(notebook_text)["cells"]
    return json.dumps([{key: cell.get(key) for key in ("source", "outputs")} for cell in cells], ensure_ascii=False)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_answer_reveal_or_note_reaches_a_student_copy(path, copies):
    text = visible_text(copies[path.name])
    found = {what: pattern.search(text).group(0) for what, pattern in GIVEAWAYS.items() if pattern.search(text)}
    assert not found, f"the student copy of {path.name} shows {found}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_prediction_keeps_its_question_and_box(path, copies):
    """The reveal's outputs go, the question's widget stays: the student guesses, then runs the cell."""
    cells = json.loads(copies[path.name])["cells"]
    asked = [cell for cell in cells if " = Prediction(" in "".join(cell["source"])]
    assert asked and all(cell["outputs"] for cell in asked), f"{path.name}: a prediction lost its box"
    revealed = [cell for cell in cells if re.search(r"\b\w+\.reveal\(", "".join(cell["source"]))]
    assert revealed and not any(cell["outputs"] for cell in revealed)


def test_a_copy_the_student_worked_in_is_kept(tmp_path, capsys):
    first, second = NOTEBOOKS[:2]
    write_student_copies([first, second], tmp_path)
    mine = tmp_path / first.name
    mine.write_text(mine.read_text(encoding="utf-8").replace("answer = None", "answer = 42", 1), encoding="utf-8")
    rewritten = write_student_copies([first, second], tmp_path)
    assert rewritten == [tmp_path / second.name]
    assert "answer = 42" in mine.read_text(encoding="utf-8")
    assert f"kept {mine}" in capsys.readouterr().out
    assert set(json.loads((tmp_path / WRITTEN).read_text())) == {first.name, second.name}


def test_copies_never_overwrite_the_notebooks_they_come_from():
    with pytest.raises(ValueError, match="holds the notebooks"):
        write_student_copies(NOTEBOOKS[:1], ROOT / "notebooks")


def recipe(target: str) -> list[str]:
    """The words of the Makefile's recipe for `target`."""
    found = re.search(rf"^{target}:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert found, f"the Makefile has no {target!r} target"
    return shlex.split(found.group(1).replace("\\\n", " "))


def makefile_variable(name: str) -> str:
    return re.search(rf"^{name} := (.+)$", (ROOT / "Makefile").read_text(), re.M).group(1).strip()


def test_make_lab_opens_the_student_copy_and_make_teach_the_instructors():
    student_dir, first = makefile_variable("STUDENT_DIR"), makefile_variable("FIRST_NOTEBOOK")
    assert makefile_variable("FIRST_STUDENT_NOTEBOOK") == "$(STUDENT_DIR)/$(notdir $(FIRST_NOTEBOOK))" and student_dir == "student"
    assert "$(FIRST_STUDENT_NOTEBOOK)" in recipe("lab") and "$(FIRST_NOTEBOOK)" not in recipe("lab")
    assert "$(FIRST_NOTEBOOK)" in recipe("teach") and first.startswith("notebooks/")
    lab_rule = re.search(r"^lab:(.*)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert "$(STUDENT_COPIES)" in lab_rule, "make lab must (re)build the student copies first"


@pytest.mark.slow
def test_a_student_copy_runs_end_to_end(tmp_path):
    """The copy `make lab` opens, run top to bottom as a student who has done nothing yet: no cell fails,
    and every checker says its exercise is not attempted (none passes, none fails)."""
    import nbformat
    from nbclient import NotebookClient

    copy = write_student_copies([ROOT / "notebooks" / "00_setup_and_tour.ipynb"], tmp_path)[0]
    notebook = nbformat.read(copy, as_version=4)
    NotebookClient(notebook, timeout=600, resources={"metadata": {"path": str(tmp_path)}}).execute()
    checker_cells = [cell for cell in notebook.cells if cell.cell_type == "code" and "check_" in cell.source]
    verdicts = ["".join(output.get("text", "") for output in cell.outputs) for cell in checker_cells]
    assert verdicts and all("Not attempted yet" in verdict for verdict in verdicts), verdicts
    assert not any("Correct" in verdict or "Not yet" in verdict for verdict in verdicts)
