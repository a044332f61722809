"""The learner's copy: what `make lab` opens shows no answer, no saved reveal and no instructor note, shows no
exercise's reference (labkit's own answer) above its exercise, keeps a student's own work when the notebooks
change, and never overwrites the instructor's copies."""

import ast
import json
import re
import shlex
from pathlib import Path

import pytest

from labkit.course.student import WRITTEN, student_copy, write_student_copies

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
    return json.dumps(
        [{key: cell.get(key) for key in ("source", "outputs")} for cell in cells], ensure_ascii=False
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_answer_reveal_or_note_reaches_a_student_copy(path, copies):
    text = visible_text(copies[path.name])
    found = {
        what: pattern.search(text).group(0) for what, pattern in GIVEAWAYS.items() if pattern.search(text)
    }
    assert not found, f"the student copy of {path.name} shows {found}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_prediction_keeps_its_question_and_box(path, copies):
    """The reveal's outputs go, the question's widget stays: the student guesses, then runs the cell."""
    cells = json.loads(copies[path.name])["cells"]
    asked = [cell for cell in cells if " = Prediction(" in "".join(cell["source"])]
    assert asked and all(cell["outputs"] for cell in asked), f"{path.name}: a prediction lost its box"
    revealed = [cell for cell in cells if re.search(r"\b\w+\.reveal\(", "".join(cell["source"]))]
    assert revealed and not any(cell["outputs"] for cell in revealed)


# Where labkit's own answer stays in view above its exercise, and why: (notebook, name) -> reason.
IN_VIEW = {
    (
        "02_the_generation_loop",
        "generate",
    ): "the loop sections 4-7 teach (steps, stops, streaming) and the one "
    "Exercise 2's cached loop is compared with",
    (
        "05_beyond_the_basics",
        "mbr_decode",
    ): "section 3's MBR run, the six answers Exercise 2's solution picks "
    "from again; Exercise 2 asks for the choice inside it (mbr_select), "
    "which is never called in view",
    (
        "09_speculative_decoding",
        "PromptLookupDrafter",
    ): "the drafter every section runs; Exercise 3 asks for its propose, which is never called in view",
}
# Notebooks that still show an exercise's reference above it ("A lab a student can do alone"): strict, so
# the entry must go once the notebook is fixed.
NOT_YET: dict[str, str] = {}


def exercise_references() -> dict[str, set[str]]:
    """{checker: the names of labkit's own answers it refuses}, read from the `references=` of each
    checker's run_own calls in labkit/checks (a list, or a name bound to one in the function or module).
    A method counts by its name, a class (its __init__) by the class's."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "labkit" / "checks").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = {
            t.id: node.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        for function in (node for node in tree.body if isinstance(node, ast.FunctionDef)):
            local = {
                t.id: node.value
                for node in ast.walk(function)
                if isinstance(node, ast.Assign)
                for t in node.targets
                if isinstance(t, ast.Name)
            }
            for call in ast.walk(function):
                if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "run_own":
                    for keyword in (k for k in call.keywords if k.arg == "references"):
                        value = keyword.value
                        if isinstance(value, ast.Name):
                            value = local.get(value.id, module.get(value.id))
                        parts = [ast.unparse(item).split(".") for item in getattr(value, "elts", [])]
                        found.setdefault(function.name, set()).update(
                            p[-2] if p[-1] == "__init__" else p[-1] for p in parts
                        )
    return found


def references_above_exercises(notebook: dict) -> set[tuple[str, str, str]]:
    """(cell id, name, exercise's checker) for each exercise reference that a code cell above its exercise
    imports or calls, in the student copy. The exercise starts at its checker cell. Prose is not read: an
    exercise names the function the student writes, often labkit's name for it."""
    references, shown = exercise_references(), set()
    cells = [cell for cell in student_copy(notebook)["cells"] if cell["cell_type"] == "code"]
    for index, cell in enumerate(cells):
        for checker in re.findall(r"\b(check_\w+)\(", "".join(cell["source"])):
            shown |= {
                (above["id"], name, checker)
                for above in cells[:index]
                for name in references.get(checker, ())
                if re.search(rf"\b{re.escape(name)}\b", "".join(above["source"]))
            }
    return shown


def test_exercise_references_are_read_from_the_checkers():
    references = exercise_references()
    assert references["check_top_p_filter"] == {"top_p_filter"}
    assert {"generate", "generate_ids"} <= references["check_greedy_loop"]  # through LABKIT_LOOPS
    assert references["check_prompt_lookup"] == {"PromptLookupDrafter", "propose"}  # a local list
    uses = {
        name
        for path in (ROOT / "labkit" / "checks").glob("*.py")
        for name in re.findall(r"^def (check_\w+)\((?:(?!^def ).)*?run_own\(", path.read_text(), re.M | re.S)
    }
    assert uses <= set(references), (
        f"checkers calling run_own whose references were not read: {uses - set(references)}"
    )


def not_yet(path: Path):
    """The notebook, expected to fail (strictly) while NOT_YET lists it."""
    if path.stem not in NOT_YET:
        return path
    return pytest.param(
        path, marks=pytest.mark.xfail(strict=True, reason=f"shows {NOT_YET[path.stem]} above its exercise")
    )


@pytest.mark.parametrize("path", [not_yet(path) for path in NOTEBOOKS], ids=lambda p: p.stem)
def test_no_exercise_reference_is_in_view_above_its_exercise(path):
    """A student who can read labkit's answer to an exercise above it learns nothing by writing it (and the
    checker refuses it anyway): import it after the exercise, where the notebook needs it."""
    shown = references_above_exercises(json.loads(path.read_text(encoding="utf-8")))
    allowed = {name for notebook, name in IN_VIEW if notebook == path.stem}
    unexpected = sorted(entry for entry in shown if entry[1] not in allowed)
    assert not unexpected, (
        f"{path.name} shows an exercise's reference above it (cell id, name, checker): {unexpected}"
    )
    assert allowed <= {name for _, name, _ in shown}, (
        f"IN_VIEW lists what {path.name} no longer shows: remove it"
    )


def test_a_copy_the_student_worked_in_is_kept(tmp_path, capsys):
    first, second = NOTEBOOKS[:2]
    write_student_copies([first, second], tmp_path)
    mine = tmp_path / first.name
    mine.write_text(
        mine.read_text(encoding="utf-8").replace("answer = None", "answer = 42", 1), encoding="utf-8"
    )
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
    assert (
        makefile_variable("FIRST_STUDENT_NOTEBOOK") == "$(STUDENT_DIR)/$(notdir $(FIRST_NOTEBOOK))"
        and student_dir == "student"
    )
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
