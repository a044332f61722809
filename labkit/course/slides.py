"""How tall each slide of a notebook's deck is, in lines, so that a test can say which ones overflow.

Cells group into slides as nbconvert's reveal.js exporter (and Voila's reveal template) groups them: a
`slide` or `subslide` cell starts a new slide, `fragment` and `-` continue the current one, `notes` and
`skip` cells are not shown, and cells tagged `solution` (labkit.course.solutions) are removed first.
A slide's height is the sum of its visible cells':
- markdown: every source line, a long one as one line per `WIDTH` characters; headings count as a line,
  a blank line stands for the margin between paragraphs, a table's separator row for its cells' padding;
- code: the source lines, unless the source is hidden (`metadata.jupyter.source_hidden`);
- text output (stream text, text/plain): its lines, one more per `OUTPUT_WIDTH` characters of a long
  one, uncapped (a deck does not scroll: what a notebook would fold into a scrolled box runs off the slide);
- a figure (image/png): the PNG's height in pixels over `PIXELS_PER_LINE`;
- a widget: 1 line for a tqdm progress bar (its text fallback), `WIDGET_LINES` for any other (sliders
  and the chart they redraw, live in Voila).

The static decks (`make slides`) show the code; live ones (Voila) hide it: `code=False` gives a live
slide's height. Calibration: matplotlib saves the course's figures at 100 dpi (a 13x8-inch figure is
an 811-pixel PNG). At 22 pixels a line, the live heights computed here are within 2.4 lines (root mean
square) of those measured on live Voila slides before they were split, in lines of the 28 that fit
one: 04's 13x8-inch figure 40 (40 measured), 03's beam tree 42 (41), 08's group sizes 39 (38), 09's
"When speculation hurts" 35 (35), 07's roofline 30 (33), 09's cost-model table 31 (32), 12's section
8.3 56 (61). tests/course/test_slides_fit.py holds every slide to those 28 lines with the code shown,
as the static decks show it: the taller of the two.

    >>> notebook = {"cells": [
    ...     {"cell_type": "markdown", "source": "## Title\\n\\nText",
    ...      "metadata": {"slideshow": {"slide_type": "slide"}}},
    ...     {"cell_type": "code", "source": "import os", "outputs": [],
    ...      "metadata": {"slideshow": {"slide_type": "skip"}}},
    ...     {"cell_type": "code", "source": "print(1)", "metadata": {},
    ...      "outputs": [{"output_type": "stream", "name": "stdout", "text": "1\\n"}]}]}
    >>> [(slide.cells, slide.height) for slide in slide_heights(notebook)]
    [([0, 2], 5.0)]

    $ python -m labkit.course.slides notebooks/*.ipynb
"""

from __future__ import annotations

import base64
import math
import re
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

from labkit.core.arguments import check_int
from labkit.course.notebook_file import check_notebook, read_notebook
from labkit.course.solutions import SOLUTION_TAG, tags, text

__all__ = ["slide_heights", "too_tall"]

LIMIT = 28  # lines that fit a slide on a 16:9 projector (reveal.js's 960x700 slide, 20-pixel text)
WIDTH = 100  # characters of prose in a line
OUTPUT_WIDTH = 120  # characters of printed text in a line (measured on 09's cost-model table)
PIXELS_PER_LINE = 22  # a figure's PNG pixels per line (calibrated above)
WIDGET_LINES = 20  # a live widget: a slider or a few and the chart they redraw
HIDDEN = {"notes", "skip"}
STARTS = {"slide", "subslide"}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PROGRESS_BAR = re.compile(r"\d+%\|")


@dataclass
class Slide:
    """One slide of a deck: the indices of its visible cells and its height in lines."""

    cells: list[int]
    height: float

    @property
    def first(self) -> int:
        """The index of the slide's first cell in the notebook."""
        return self.cells[0]


def slide_type(cell: dict) -> str:
    """The cell's slide type, "-" (continue the slide) when it has none."""
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type") or "-"


def shown(cell: dict) -> bool:
    """Whether the cell reaches a deck: not notes, not skipped, not a worked solution."""
    return slide_type(cell) not in HIDDEN and SOLUTION_TAG not in tags(cell)


def group(cells: list[dict]) -> list[list[int]]:
    """The indices of the shown cells, grouped into slides (the first shown cell always starts one).

    >>> kinds = ["slide", "-", "notes", "subslide", "fragment"]
    >>> group([{"metadata": {"slideshow": {"slide_type": kind}}} for kind in kinds])
    [[0, 1], [3, 4]]
    """
    slides: list[list[int]] = []
    for index, cell in enumerate(cells):
        if not shown(cell):
            continue
        if not slides or slide_type(cell) in STARTS:
            slides.append([])
        slides[-1].append(index)
    return slides


def wrapped_lines(source: str, width: int) -> int:
    """How many lines `source` takes when each line wraps at `width` characters.

    >>> wrapped_lines("short\\n\\n" + "x" * 150, 100)
    4
    """
    return (
        sum(max(1, math.ceil(len(line) / width)) for line in source.rstrip("\n").split("\n")) if source else 0
    )


def png_height(data: str) -> int:
    """The pixel height of a base64 PNG, read from its header (IHDR: width, then height, at bytes 16-24)."""
    header = base64.b64decode(data[:32])
    return struct.unpack(">I", header[20:24])[0]


def merged(outputs: list[dict]) -> list[dict]:
    """The outputs as a page shows them: consecutive stream outputs of one name (stdout, stderr) joined,
    as one print after another continues the same text.

        >>> merged([{"output_type": "stream", "name": "stdout", "text": "The"},
        ...         {"output_type": "stream", "name": "stdout", "text": " sky"}])
        [{'output_type': 'stream', 'name': 'stdout', 'text': 'The sky'}]
    """
    joined: list[dict] = []
    for output in outputs:
        previous = joined[-1] if joined else {}
        if (
            output["output_type"] == "stream"
            and previous.get("output_type") == "stream"
            and previous.get("name") == output.get("name")
        ):
            previous["text"] += text({"source": output["text"]})
        else:
            joined.append(dict(output, text=text({"source": output["text"]})) if "text" in output else output)
    return joined


def output_height(output: dict) -> float:
    """The lines one saved output takes on a slide (see the module docstring)."""
    if output["output_type"] == "stream":
        return wrapped_lines(text({"source": output["text"]}), OUTPUT_WIDTH)
    data = output.get("data", {})
    fallback = text({"source": data.get("text/plain", "")})
    if "image/png" in data:
        return png_height(text({"source": data["image/png"]})) / PIXELS_PER_LINE
    if WIDGET_VIEW in data:
        return 1 if PROGRESS_BAR.search(fallback) else WIDGET_LINES
    if output["output_type"] == "error":
        return len(output.get("traceback", []))
    return wrapped_lines(fallback, OUTPUT_WIDTH)


def cell_height(cell: dict, code: bool = True) -> float:
    """The lines one cell takes on a slide: its markdown, or its code (if the deck shows code and the
    source is not hidden) and its outputs."""
    if cell["cell_type"] != "code":
        return wrapped_lines(text(cell), WIDTH)
    shows_code = code and not cell.get("metadata", {}).get("jupyter", {}).get("source_hidden", False)
    lines = len(text(cell).rstrip("\n").split("\n")) if shows_code else 0
    return lines + sum(map(output_height, merged(cell.get("outputs", []))))


def slide_heights(notebook: dict, code: bool = True) -> list[Slide]:
    """Every slide of the notebook (as loaded from JSON) with its height in lines, the code shown as in
    the static decks (`code=False`: hidden, as in Voila's live decks)."""
    cells = check_notebook("notebook", notebook)["cells"]
    if not isinstance(code, bool):
        raise TypeError(f"code must be True (the code shown) or False (hidden), got {code!r}.")
    return [
        Slide(indices, float(sum(cell_height(cells[i], code) for i in indices))) for indices in group(cells)
    ]


def describe(cell: dict, index: int) -> str:
    """How a report names a cell: "cell 15 [6]" for code run 6th, or its first line.

    >>> describe({"cell_type": "markdown", "source": "## 2. Truncation\\nmore"}, 11)
    "cell 11 '## 2. Truncation'"
    """
    if cell["cell_type"] == "code" and cell.get("execution_count"):
        return f"cell {index} [{cell['execution_count']}]"
    return f"cell {index} {text(cell).strip().splitlines()[0][:60]!r}"


def overflow(cells: list[dict], slide: Slide, limit: int = LIMIT) -> str:
    """What a report says of a slide over the limit: its first cell and height, and its tallest cell's
    when that cell alone is over the limit too (no split can fix it)."""
    said = f"{describe(cells[slide.first], slide.first)}: {round(slide.height)} lines"
    tallest = max(slide.cells, key=lambda index: cell_height(cells[index]))
    alone = round(cell_height(cells[tallest]))
    if alone <= limit:
        return said
    return said + (
        ", a single cell" if len(slide.cells) == 1 else f", {describe(cells[tallest], tallest)} alone {alone}"
    )


def too_tall(path: str | Path, limit: int = LIMIT) -> list[str]:
    """One line per slide of the notebook at `path` taller than `limit` lines, counted in whole lines (a
    figure's fraction of a line is within the estimate's error), [] when all fit."""
    check_int("limit", limit, minimum=1, note="lines on a slide")
    cells, path = read_notebook(path)["cells"], Path(path)
    return [
        f"{path.name} slide {number} ({overflow(cells, slide, limit)})"
        for number, slide in enumerate(slide_heights({"cells": cells}))
        if round(slide.height) > limit
    ]


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print("\n".join(too_tall(name)) or f"{name}: every slide fits")
