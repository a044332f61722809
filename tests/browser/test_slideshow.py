"""Live slides inside JupyterLab: jupyterlab-slideshow's deck mode presents the notebook itself, from the
cells' `slideshow` metadata, with the kernel and the widgets live and every cell editable.

The test writes a tiny notebook (a title slide with speaker notes, a slide with an `ipywidgets.interact`
slider in the cell under its heading, a skipped cell, and a worked solution marked as labkit.course.solutions
marks the course's) into a folder of its own and serves it from a JupyterLab of its own, so no course
notebook is run or touched. It runs the slider's cell, starts the deck from the title slide with the
command palette's "Start Deck", pages forward with the arrow key (past the last slide, the worked solution
never shows), drags the slider and checks that the kernel reprints the output, then leaves the deck with Escape; no request may
leave the local JupyterLab and the console may show no error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from labkit.course.solutions import mark_solution

from .conftest import Lab, start_lab, stop_lab
from .test_jupyterlab import (
    CELL_TIMEOUT_MS,
    OPEN_TIMEOUT_MS,
    assert_no_console_errors,
    drag_slider,
    run_command,
    slider,
)

try:
    from playwright.sync_api import expect
except ImportError:  # the fixtures skip these tests (in CI: fail them) with how to install playwright
    pass

pytestmark = pytest.mark.browser

NOTEBOOK = "deck.ipynb"
SLIDER_SOURCE = """from ipywidgets import interact

@interact(x=(0, 10))
def square(x=5):
    print(f"{x} squared is {x * x}")"""
# (cell type, slide type, source). "" is JupyterLab's "-" (continue the slide); jupyterlab-slideshow 0.3.4
# shows no cell whose slide type is the literal "-" that the classic notebook wrote.
CELLS = [
    ("markdown", "slide", "# A deck with a live slider"),
    ("markdown", "notes", "Speaker notes: move the slider."),
    ("markdown", "slide", "## Move the slider"),
    ("code", "", SLIDER_SOURCE),
    ("code", "skip", 'print("not in the deck")'),
    ("markdown", "subslide", "### Worked solution"),
    ("code", "", 'print("the answer")'),
]
TITLE, NOTES, HEADING, SLIDER, SKIPPED, SOLUTION_HEADING, SOLUTION = range(len(CELLS))
PRESENTING = "body[data-jp-deck-mode='presenting']"
ON_SCREEN = re.compile(r"\bjp-deck-mod-onscreen\b")


def deck_notebook() -> dict:
    """CELLS as an nbformat 4 notebook with a Python kernel."""
    cells = [
        {
            "cell_type": kind,
            "id": f"cell-{index}",
            "metadata": {"slideshow": {"slide_type": slide_type}},
            "source": source,
            **({"execution_count": None, "outputs": []} if kind == "code" else {}),
        }
        for index, (kind, slide_type, source) in enumerate(CELLS)
    ]
    for cell in cells[SOLUTION_HEADING:]:
        mark_solution(cell)  # as labkit.course.solutions marks the course's: a tag and slide type skip
    kernel = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    return {"cells": cells, "nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": kernel}}


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[Lab]:
    """A JupyterLab of this module's own, serving a folder that holds only NOTEBOOK (it overrides the
    package's `lab`, so `page` closes its tabs and stops its kernels here)."""
    root = tmp_path_factory.mktemp("deck-notebooks")
    (root / NOTEBOOK).write_text(json.dumps(deck_notebook()))
    lab = start_lab(tmp_path_factory.mktemp("jupyterlab-deck"), root=root)
    yield lab
    stop_lab(lab)


def test_deck_mode_presents_the_notebook_and_its_slider_reruns(page, lab, console_errors):
    allowed = (f"{lab.url}/", f"ws{lab.url.removeprefix('http')}/", "data:", "blob:")
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("websocket", lambda socket: requests.append(socket.url))
    page.goto(lab.workspace_url("deck", NOTEBOOK))
    panel = page.locator(".jp-NotebookPanel:visible")
    cells = panel.locator(".jp-Notebook-cell")
    expect(cells).to_have_count(len(CELLS), timeout=OPEN_TIMEOUT_MS)
    # The status bar, not the toolbar's execution indicator: that reads "idle" before a kernel is attached,
    # and a cell run then does nothing.
    expect(page.locator(".jp-StatusBar-Widget")).to_contain_text(
        "Python 3 (ipykernel) | Idle", timeout=OPEN_TIMEOUT_MS
    )
    # Run the slider's cell (not with run_cells: interact's Output widget nests a second output area).
    prompt = cells.nth(SLIDER).locator(".jp-InputPrompt")
    prompt.click()
    page.keyboard.press("Control+Enter")
    expect(prompt).to_have_text(re.compile(r"\[\d+\]:"), timeout=CELL_TIMEOUT_MS)
    output = cells.nth(SLIDER).locator(".jp-Cell-outputArea")
    expect(output).to_contain_text("5 squared is 25", timeout=CELL_TIMEOUT_MS)

    # The deck opens at the active cell: select the title, then Start Deck (or the notebook toolbar's button).
    expect(panel.locator('.jp-Toolbar-item[data-jp-item-name="deck"]')).to_be_visible()
    cells.nth(TITLE).click()
    page.keyboard.press("Escape")  # command mode, where the deck's arrow keys apply
    run_command(page, "Start Deck")
    expect(page.locator(PRESENTING)).to_be_attached()
    expect(panel).to_have_class(re.compile(r"\bjp-Deck\b"))
    expect(cells.nth(TITLE)).to_have_class(ON_SCREEN)
    expect(cells.nth(TITLE)).to_be_visible()
    for hidden in (NOTES, HEADING, SLIDER, SKIPPED, SOLUTION_HEADING, SOLUTION):
        expect(cells.nth(hidden)).not_to_have_class(ON_SCREEN)

    page.keyboard.press("ArrowRight")  # the next slide: its heading and the slider's cell under it
    for shown in (HEADING, SLIDER):
        expect(cells.nth(shown)).to_have_class(ON_SCREEN)
    for hidden in (TITLE, NOTES, SKIPPED, SOLUTION_HEADING, SOLUTION):
        expect(cells.nth(hidden)).not_to_have_class(ON_SCREEN)
    page.keyboard.press("ArrowRight")  # past the last slide: the worked solution is not one
    page.keyboard.press("ArrowDown")
    expect(cells.nth(SLIDER)).to_have_class(ON_SCREEN)
    for hidden in (SOLUTION_HEADING, SOLUTION):
        expect(cells.nth(hidden)).not_to_have_class(ON_SCREEN)
    expect(output).to_be_visible()

    # The widget talks to the kernel in deck mode: dragging the slider reruns the callback.
    x = slider(output, "x")
    drag_slider(x, 1.0)
    expect(x.locator(".widget-readout")).to_have_text("10")
    expect(output).to_contain_text("10 squared is 100", timeout=CELL_TIMEOUT_MS)
    expect(output).not_to_contain_text("5 squared is 25")
    expect(page.locator(PRESENTING)).to_be_attached()  # still presenting

    page.keyboard.press("Escape")  # leaves the deck: the notebook as it was, every cell shown
    expect(page.locator(PRESENTING)).not_to_be_attached()
    expect(panel).not_to_have_class(re.compile(r"\bjp-Deck\b"))
    expect(cells.nth(SKIPPED)).to_be_visible()

    assert any(url.startswith(f"{lab.url}/lab/extensions/jupyterlab-slideshow/") for url in requests), (
        "jupyterlab-slideshow was not loaded from the local JupyterLab"
    )
    remote = [url for url in requests if not url.startswith(allowed)]
    assert not remote, f"requests left the local JupyterLab: {remote}"
    assert_no_console_errors(console_errors)
