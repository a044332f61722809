"""Every notebook is tagged for slides and converts to a reveal.js deck."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
# "" continues the slide, as JupyterLab writes it. The older "-" means the same to nbconvert and Voila, but
# jupyterlab-slideshow (deck mode) never shows a cell marked "-", so the notebooks do not use it.
SLIDE_TYPES = {"slide", "subslide", "fragment", "skip", "notes", ""}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_cell_is_tagged_for_slides_and_sections_start_slides(path):
    cells = json.loads(path.read_text())["cells"]
    types = [cell["metadata"].get("slideshow", {}).get("slide_type") for cell in cells]
    assert set(types) <= SLIDE_TYPES, (
        f"{path.name}: slide types {set(types) - SLIDE_TYPES} (None: a cell without one; "
        "'-': use '', which deck mode shows)"
    )
    assert types[0] == "slide" and types.count("slide") >= 3


@pytest.mark.parametrize("path", NOTEBOOKS[:1], ids=lambda p: p.stem)
def test_notebook_converts_to_a_reveal_deck(path, tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "slides",
            "--output-dir",
            str(tmp_path),
            str(path),
        ],
        check=True,
        capture_output=True,
    )
    deck = (tmp_path / f"{path.stem}.slides.html").read_text()
    slides_in_notebook = sum(
        c["metadata"].get("slideshow", {}).get("slide_type") == "slide"
        for c in json.loads(path.read_text())["cells"]
    )
    assert "Reveal.initialize" in deck
    assert deck.count("<section") >= slides_in_notebook


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_cell_ids_are_unique(path):
    ids = [cell.get("id") for cell in json.loads(path.read_text())["cells"]]
    assert len(ids) == len(set(ids)), f"{path.name} repeats a cell id (nbformat renames it on every load)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_worked_solutions_are_collapsed(path):
    """A projected notebook must not show an answer before the room has tried: the code cells under each
    "Worked solution" heading open collapsed (JupyterLab shows them after a click)."""
    cells = json.loads(path.read_text())["cells"]
    headings = [
        i
        for i, cell in enumerate(cells)
        if cell["cell_type"] == "markdown"
        and "".join(cell["source"]).lstrip("# ").lower().startswith("worked solution")
    ]
    for i in headings:
        following = cells[i + 1 :]
        solution = following[
            : next((k for k, c in enumerate(following) if c["cell_type"] != "code"), len(following))
        ]
        assert solution, f"{path.name}: cell {i} is a worked-solution heading with no code under it"
        shown = [
            i + 1 + k
            for k, c in enumerate(solution)
            if not c["metadata"].get("jupyter", {}).get("source_hidden")
        ]
        assert not shown, f"{path.name}: worked-solution cells {shown} are not collapsed"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_saved_progress_bars_show_where_they_ended(path):
    """A saved tqdm bar's text fallback is its final state (labkit.viz.progress), not "0%"."""
    from labkit.viz.progress import WIDGET_VIEW

    stale = [
        index
        for index, cell in enumerate(json.loads(path.read_text())["cells"])
        for output in cell.get("outputs", [])
        if WIDGET_VIEW in output.get("data", {})
        and "".join(output["data"].get("text/plain", "")).split("|")[0].endswith(" 0%")
    ]
    assert not stale, f"cells {stale} show a progress bar at 0%: run `python -m labkit.viz.progress {path}`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_numbered_section_has_speaker_notes(path):
    """Each "## N." section slide is followed by a notes cell for the presenter view."""
    cells = json.loads(path.read_text())["cells"]
    kind = [cell["metadata"].get("slideshow", {}).get("slide_type") for cell in cells]
    missing = [
        index
        for index, cell in enumerate(cells)
        if kind[index] == "slide"
        and re.match(r"## \d+\.", "".join(cell["source"]))
        and "notes" not in kind[index + 1 : index + 2]
    ]
    assert not missing, f"section slides without a notes cell right after them: cells {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_opening_note_says_which_presentation_mode_the_notes_assume(path):
    cells = json.loads(path.read_text())["cells"]
    notes = [  # a notes cell that does not start "Instructor:" is a slide's prose beyond its word limit
        "".join(c["source"])
        for c in cells
        if c["metadata"].get("slideshow", {}).get("slide_type") == "notes"
        and "".join(c["source"]).startswith("Instructor:")
    ]
    assert notes, f"{path.name} has no instructor notes"
    assert "deck mode" in notes[0] and "make present" in notes[0], (
        f"{path.name}: its first instructor note does not say which presentation mode the notes assume "
        "(deck mode inside JupyterLab, or the Voila deck of `make present`)"
    )
