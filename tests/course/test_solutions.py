"""Worked solutions stay out of sight: marked in the notebooks with no answer saved under them, absent
from the student copies (`make student`) and from the decks, static (`make slides`) and live
(`make present`). labkit.course.solutions marks them; labkit.course.student writes the copies."""

import json
import re
import shlex
from pathlib import Path

import nbformat
import pytest

from labkit.course.locks import is_folded, prediction_spans, reading_after
from labkit.course.solutions import BEGIN, END, SOLUTION_TAG, hide_solutions
from labkit.course.student import is_reveal_cell, write_student_copies

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
DECK_NOTEBOOK = ROOT / "notebooks" / "00_setup_and_tour.ipynb"
CHECKER_CALL = re.compile(r"\bcheck_\w+\(")
# Each exercise's answer as its worked solution printed it before solutions were saved without outputs.
ANSWERS = {
    "00": ["134,515,008", "538 MB"],
    "05": ["pick 0"],
    "06": ["754,974,720"],
    "07": ["60,977"],
    "08": ["56.4 MB"],
}


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def worked_solutions(notebook_cells: list[dict]) -> list[tuple[dict, list[dict]]]:
    """(heading, code cells under it) for each "Worked solution" heading."""
    found = []
    for i, cell in enumerate(notebook_cells):
        if cell["cell_type"] == "markdown" and "".join(cell["source"]).lstrip("# ").lower().startswith(
            "worked solution"
        ):
            following = notebook_cells[i + 1 :]
            end = next((k for k, c in enumerate(following) if c["cell_type"] != "code"), len(following))
            found.append((cell, following[:end]))
    return found


def tagged_solution(cell: dict) -> bool:
    return SOLUTION_TAG in cell["metadata"].get("tags", [])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_worked_solutions_are_marked_and_saved_without_outputs(path):
    solutions = worked_solutions(cells(path))
    assert solutions, f"{path.name} has no worked solution"
    for heading, code_cells in solutions:
        assert tagged_solution(heading), (
            f"{path.name}: heading {heading['id']} is not tagged {SOLUTION_TAG!r}"
        )
        skipped = [
            cell["id"]
            for cell in [heading, *code_cells]
            if cell["metadata"].get("slideshow", {}).get("slide_type") != "skip"
        ]
        assert not skipped, (
            f"{path.name}: solution cells {skipped} would show in deck mode: give them slide type skip"
        )
        assert code_cells, f"{path.name}: heading {heading['id']} has no code under it"
        for cell in code_cells:
            lines = "".join(cell["source"]).splitlines()
            assert tagged_solution(cell) and "nbval-ignore-output" in cell["metadata"]["tags"], cell["id"]
            assert (lines[0], lines[-1]) == (BEGIN, END), f"{path.name}: cell {cell['id']} lacks the markers"
    unmarked = [
        cell["id"]
        for cell in cells(path)
        if tagged_solution(cell) and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]
    assert not unmarked, f"{path.name}: solution cells saved with outputs: {unmarked}"


def test_hide_solutions_drops_an_output_that_a_run_saved(tmp_path):
    """What `make notebooks` does after executing: the committed notebooks are already in that state."""
    copy = tmp_path / "06.ipynb"
    notebook = json.loads((ROOT / "notebooks" / "06_kv_cache.ipynb").read_text(encoding="utf-8"))
    copy.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    assert hide_solutions(copy) == 0
    solution = next(
        cell for cell in notebook["cells"] if tagged_solution(cell) and cell["cell_type"] == "code"
    )
    solution["outputs"] = [{"name": "stdout", "output_type": "stream", "text": ["754,974,720 bytes\n"]}]
    solution["execution_count"] = 7
    copy.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    assert hide_solutions(copy) == 1
    assert "754,974,720" not in copy.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def student_copies(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("student")
    return {path.name: path for path in write_student_copies(NOTEBOOKS, out)}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_copy_has_no_solution_and_no_answer(path, student_copies):
    copy = student_copies[path.name]
    text = copy.read_text(encoding="utf-8")
    notebook = nbformat.reads(text, as_version=4)
    nbformat.validate(notebook)
    assert not [cell.id for cell in notebook.cells if tagged_solution(cell)]
    assert "BEGIN SOLUTION" not in text and not worked_solutions(json.loads(text)["cells"])
    given_away = [answer for answer in ANSWERS.get(path.name[:2], []) if answer in text]
    assert not given_away, f"{copy.name} still shows the answer(s) {given_away}"
    checker_outputs = [
        cell.id
        for cell in notebook.cells
        if cell.cell_type == "code" and CHECKER_CALL.search(cell.source) and cell.outputs
    ]
    assert not checker_outputs, f"{copy.name}: checker cells keep their saved verdict: {checker_outputs}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_copy_keeps_every_other_cell_and_output(path, student_copies):
    """Besides solutions, instructor notes and checker verdicts, a copy changes only what locks a prediction
    (labkit.course.locks): the outputs from a box to the end of its reading, and the reading's prose folded."""
    original, copied = cells(path), cells(student_copies[path.name])
    kept = {cell["id"]: cell for cell in copied}
    folds = "".join("".join(cell["source"]) for cell in copied if is_folded(cell))
    removed = [
        cell["id"]
        for cell in original
        if cell["id"] not in kept
        and not tagged_solution(cell)
        and not "".join(cell["source"]).startswith("Instructor:")
        and "".join(cell["source"]).strip() not in folds
    ]
    assert not removed, f"cells that are neither solutions nor instructor notes were removed: {removed}"
    locked = {
        original[k]["id"]
        for _, asked, revealed in prediction_spans(original)
        for k in [*range(asked + 1, revealed), *reading_after(original, revealed)]
    }
    changed = [
        cell["id"]
        for cell in original
        if cell["id"] in kept
        and cell["cell_type"] == "code"
        and not CHECKER_CALL.search("".join(cell["source"]))
        and not is_reveal_cell(cell)
        and cell["id"] not in locked
        and kept[cell["id"]]["outputs"] != cell["outputs"]
    ]
    assert not changed, f"outputs that give nothing away were changed: {changed}"


def solution_cell_ids(path: Path) -> list[str]:
    return [cell["id"] for cell in cells(path) if tagged_solution(cell)]


def test_static_deck_leaves_out_the_worked_solutions(tmp_path, monkeypatch):
    """`make slides`' configuration, applied to notebook 00 in this process."""
    from nbconvert import SlidesExporter
    from traitlets.config.loader import PyFileConfigLoader

    monkeypatch.chdir(ROOT)  # the configuration names its template relative to the repository
    config = PyFileConfigLoader("offline_decks.py", path=str(ROOT / "slides")).load_config()
    path = DECK_NOTEBOOK
    deck, _ = SlidesExporter(config=config).from_filename(str(path))
    assert "Reveal.initialize" in deck and 'id="cell-id=' in deck
    shown = [cell_id for cell_id in solution_cell_ids(path) if f'id="cell-id={cell_id}"' in deck]
    assert not shown and "BEGIN SOLUTION" not in deck and "celltag_solution" not in deck


def makefile_recipe_options(target: str, prefix: str) -> list[str]:
    """The options starting with `prefix` in the Makefile's recipe for `target`."""
    recipe = re.search(rf"^{target}:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe, f"the Makefile has no {target!r} target"
    return [word for word in shlex.split(recipe.group(1).replace("\\\n", " ")) if word.startswith(prefix)]


def test_live_deck_leaves_out_the_worked_solutions():
    """`make present`'s options reach Voila's exporter, whose preprocessors run before Voila executes the
    notebook and renders the deck (voila.exporter.VoilaExporter.generate_from_notebook_node)."""
    from nbconvert.exporters import Exporter
    from voila.app import Voila
    from voila.exporter import VoilaExporter

    options = makefile_recipe_options("present", "--TagRemovePreprocessor.")
    assert options, "`make present` does not configure nbconvert's TagRemovePreprocessor"
    app = Voila()
    app.parse_command_line([*options, "."])
    path = DECK_NOTEBOOK
    notebook = nbformat.read(path, as_version=4)
    rendered, _ = Exporter.from_notebook_node(VoilaExporter(config=app.config), notebook)
    kept = {cell.id for cell in rendered.cells}
    assert kept and not kept & set(solution_cell_ids(path))
    assert len(kept) == len(notebook.cells) - len(solution_cell_ids(path))
