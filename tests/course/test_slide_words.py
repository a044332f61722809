"""Slides an audience reads: at most labkit.course.slide_words.WORD_LIMIT words of prose on any slide of any
deck; what the presenter says beyond that sits in the speaker notes. Only the notebooks' JSON is read."""

from pathlib import Path

import pytest

from labkit.course.slide_words import WORD_LIMIT, prose_words, slide_words, wordy_slides

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_slide_holds_at_most_the_word_limit(path):
    wordy = wordy_slides(path)
    assert not wordy, (
        f"slides with more than {WORD_LIMIT} words of prose: move the rest into a markdown cell of slide "
        "type `notes` (the notebook still shows it, the deck's speaker view too):\n" + "\n".join(wordy)
    )


def test_prose_leaves_out_code_formulas_tags_and_tables():
    assert prose_words("Two words") == 2
    assert prose_words("```python\nx = 1 + 2\n```\n$$a = b + c$$\n<details><summary>Open</summary>") == 1
    assert prose_words("| a | b |\n|---|---|\n| c | d |\nthree more words") == 3


def test_notes_and_skipped_cells_are_not_on_the_slide():
    def cell(words: int, kind: str) -> dict:
        return {
            "cell_type": "markdown",
            "source": "word " * words,
            "metadata": {"slideshow": {"slide_type": kind}},
        }

    cells = [
        cell(100, "slide"),
        cell(500, "notes"),
        cell(15, "fragment"),
        cell(900, "skip"),
        cell(30, "subslide"),
    ]
    assert slide_words(cells) == [(0, 115), (4, 30)]
