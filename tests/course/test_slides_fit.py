"""Every slide of every deck fits a 16:9 projector: at most 28 lines, counting the code as the static
decks show it, the outputs, and each figure's height (labkit.course.slides, which says how the lines
are counted and calibrated). Only the notebooks' JSON is read: nothing runs, no model loads."""

import base64
import json
import struct
from pathlib import Path

import pytest

from labkit.course.slides import (
    LIMIT,
    PIXELS_PER_LINE,
    WIDGET_LINES,
    cell_height,
    group,
    png_height,
    slide_heights,
    too_tall,
)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def cell(kind: str = "markdown", source: str = "text", slide_type: str = "-", **fields) -> dict:
    return {
        "cell_type": kind,
        "source": source,
        "metadata": {"slideshow": {"slide_type": slide_type}},
        **fields,
    }


def png(width: int, height: int) -> str:
    """A base64 PNG header: the signature, then the IHDR chunk that holds the size."""
    header = (
        b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sII", 13, b"IHDR", width, height) + b"\x08\x06\x00\x00\x00"
    )
    return base64.b64encode(header).decode()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_slide_fits_a_projector(path):
    overflowing = too_tall(path)
    assert not overflowing, (
        f"slides taller than {LIMIT} lines: split them (a later cell's slide type `subslide`), "
        "mark imports and helpers `skip`, or shorten a cell too tall alone (a smaller figure, "
        "a shorter output):\n" + "\n".join(overflowing)
    )


def test_slides_group_as_reveal_groups_them():
    solution = cell(slide_type="subslide")
    solution["metadata"]["tags"] = ["solution"]
    cells = [
        cell(slide_type="slide"),
        cell(slide_type="notes"),
        cell(slide_type="fragment"),
        cell(slide_type="skip"),
        cell(slide_type="subslide"),
        cell(),
        solution,
    ]
    assert group(cells) == [[0, 2], [4, 5]]


def test_heights_count_text_code_outputs_and_figures():
    figure = {"output_type": "display_data", "data": {"image/png": png(1311, 811), "text/plain": "<Figure>"}}
    widget = {
        "output_type": "display_data",
        "data": {"application/vnd.jupyter.widget-view+json": {}, "text/plain": "Explorer(run the notebook)"},
    }
    bar = {
        "output_type": "display_data",
        "data": {
            "application/vnd.jupyter.widget-view+json": {},
            "text/plain": "steps: 100%|██████████| 6/6 [00:08<00:00]",
        },
    }
    printed = {"output_type": "stream", "name": "stdout", "text": "3\n"}
    hidden = cell("code", "x = 1\ny = 2", outputs=[printed])
    hidden["metadata"]["jupyter"] = {"source_hidden": True}
    notebook = {
        "cells": [
            cell(source="## Title\n\n" + "word " * 30, slide_type="slide"),  # 3 + 1 wrapped
            cell("code", "plot()\nshow()", outputs=[figure]),
            hidden,
            cell("code", "explore()", slide_type="subslide", outputs=[widget, bar]),
        ]
    }
    assert png_height(png(1311, 811)) == 811
    first, second = slide_heights(notebook)
    assert first.height == pytest.approx(4 + 2 + 811 / PIXELS_PER_LINE + 1)
    assert second.height == 1 + WIDGET_LINES + 1
    live = [slide.height for slide in slide_heights(notebook, code=False)]
    assert live == [pytest.approx(4 + 811 / PIXELS_PER_LINE + 1), WIDGET_LINES + 1]


def test_streamed_pieces_count_as_the_text_they_join():
    """A token printed at a time is saved as one stream output per token, shown as one line of text."""
    pieces = [
        {"output_type": "stream", "name": "stdout", "text": piece} for piece in ["The", " sky", " is\n"]
    ]
    assert cell_height(cell("code", "stream()", outputs=pieces)) == 1 + 1


def test_a_tall_slide_is_named_with_its_first_cell_and_a_cell_too_tall_alone(tmp_path):
    path = tmp_path / "99_demo.ipynb"
    path.write_text(
        json.dumps(
            {
                "cells": [
                    cell(source="## Long\n" + "line\n" * 40, slide_type="slide"),
                    cell("code", "print(1)", execution_count=7, outputs=[]),
                    cell(
                        "code",
                        "plot()",
                        slide_type="subslide",
                        execution_count=8,
                        outputs=[{"output_type": "stream", "text": "x\n" * 30}],
                    ),
                ]
            }
        )
    )
    assert too_tall(path) == [
        "99_demo.ipynb slide 0 (cell 0 '## Long': 42 lines, cell 0 '## Long' alone 41)",
        "99_demo.ipynb slide 1 (cell 2 [8]: 31 lines, a single cell)",
    ]
