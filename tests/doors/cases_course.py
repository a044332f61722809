"""Bad-input cases of the course tools (labkit/course/, see door.py for the columns): the doors each module
names in its `__all__` (public_names.MODULE_DOORS), the tools `make student`, `make site` and the slide
checks run. A tool refuses to write over its own sources, and a file that is not a Jupyter notebook is
refused by name before anything is written."""

import json

from door import Door, wrong

from labkit.course.alt_texts import apply_alt_texts
from labkit.course.notebook_file import read_notebook
from labkit.course.site import build_site
from labkit.course.slide_words import wordy_slides
from labkit.course.slides import slide_heights, too_tall
from labkit.course.solutions import hide_solutions
from labkit.course.student import student_copy, write_student_copies

NOTEBOOK = "notebooks/00_setup_and_tour.ipynb"
NOT_A_NOTEBOOK = 'a Jupyter notebook (nbformat 4 JSON with a list of "cells")'


def file_with(kit, text: str, name: str = "broken.ipynb") -> str:
    """A file `name` holding `text`, in the case's own folder; its path."""
    path = kit.tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


CASES = [
    Door(
        "labkit.course.student.write_student_copies",
        lambda kit: write_student_copies([NOTEBOOK], "notebooks"),
        ValueError,
        ("out_dir", "holds the notebooks the copies are made from"),
    ),
    # one path where a list goes (was: a path per letter), a file that is not JSON, a dict that is no notebook
    Door(
        "labkit.course.student.write_student_copies",
        lambda kit: write_student_copies(NOTEBOOK, kit.tmp_path / "student"),
        TypeError,
        ("paths must be a list of notebook paths, got str", "[path]"),
    ),
    Door(
        "labkit.course.student.write_student_copies",
        lambda kit: write_student_copies([NOTEBOOK, file_with(kit, "no JSON")], kit.tmp_path / "student"),
        ValueError,
        ("paths[1]", "broken.ipynb", NOT_A_NOTEBOOK, "not JSON"),
    ),
    Door(
        "labkit.course.student.student_copy",
        lambda kit: student_copy({"metadata": {}, "nbformat": 4}),
        ValueError,
        ("notebook must be", NOT_A_NOTEBOOK, 'it has no "cells"'),
    ),
    Door(
        "labkit.course.student.student_copy",
        lambda kit: student_copy({"cells": ["x = 1"]}),
        ValueError,
        ("notebook must be", NOT_A_NOTEBOOK, "cells[0] is str"),
    ),
    Door(
        "labkit.course.solutions.hide_solutions",
        lambda kit: hide_solutions(file_with(kit, "{]")),
        ValueError,
        ("path", "broken.ipynb", NOT_A_NOTEBOOK, "not JSON"),
    ),
    Door(
        "labkit.course.notebook_file.read_notebook",
        lambda kit: read_notebook(file_with(kit, json.dumps({"worksheets": []}))),
        ValueError,
        ("path", "broken.ipynb", NOT_A_NOTEBOOK, 'it has no "cells"'),
    ),
    Door(
        "labkit.course.slides.slide_heights",
        lambda kit: slide_heights({"cells": []}, code="hidden"),
        TypeError,
        ("code must be True", "'hidden'"),
    ),
    Door("labkit.course.slides.too_tall", lambda kit: too_tall(NOTEBOOK, 0), ValueError, ("limit", "got 0")),
    Door(
        "labkit.course.slide_words.wordy_slides",
        lambda kit: wordy_slides(NOTEBOOK, "120"),
        ValueError,
        ("limit", "got '120'"),
    ),
    Door(
        "labkit.course.site.build_site",
        lambda kit: build_site([NOTEBOOK], "notebooks"),
        ValueError,
        ("out_dir 'notebooks'", "holds its sources"),
    ),
    Door(
        "labkit.course.site.build_site",
        lambda kit: build_site([NOTEBOOK], "."),
        ValueError,
        ("out_dir '.'", "holds its sources"),
    ),
    Door(
        "labkit.course.site.build_site",
        lambda kit: build_site([NOTEBOOK], "build/x", source_dir="notebooks/.."),
        ValueError,
        ("source_dir",),
    ),
    Door(
        "labkit.course.site.build_site",
        lambda kit: build_site(NOTEBOOK, kit.tmp_path / "site"),
        TypeError,
        ("paths must be a list of notebook paths, got str",),
    ),
    Door(
        "labkit.course.site.build_site",
        lambda kit: build_site(
            [file_with(kit, "[1, 2]")], kit.tmp_path / "site", source_dir=kit.tmp_path / "source"
        ),
        ValueError,
        ("paths[0]", "broken.ipynb", NOT_A_NOTEBOOK, "got list"),
    ),
    Door(
        "labkit.course.alt_texts.apply_alt_texts",
        lambda kit: apply_alt_texts(file_with(kit, "no JSON"), {"broken": {"c1": "Bars of step time"}}),
        ValueError,
        ("notebook_path", "broken.ipynb", NOT_A_NOTEBOOK, "not JSON"),
    ),
    Door(
        "labkit.course.alt_texts.apply_alt_texts",
        lambda kit: apply_alt_texts(NOTEBOOK, {"00_setup_and_tour": "Bars of step time"}),
        TypeError,
        ("texts must be a dict of {cell id: alternative text} dicts", "texts['00_setup_and_tour'] is str"),
    ),
    wrong("labkit.course.accessibility.accessible_markup", words=("page",)),
    wrong("labkit.course.alt_texts.apply_alt_texts", words=("notebook_path",)),
    wrong("labkit.course.accessibility.finish_pages", words=("out_dir",)),
    wrong("labkit.course.glossary.Term", words=("Term's meaning must be str",)),
    wrong("labkit.course.locks.lock_predictions", words=("cells",)),
    wrong("labkit.course.notebook_file.read_notebook", words=("path",)),
    wrong("labkit.course.site.build_site", words=("paths",)),
    wrong("labkit.course.slide_words.slide_words", words=("cells",)),
    wrong("labkit.course.slide_words.wordy_slides", words=("path",)),
    wrong("labkit.course.slides.slide_heights", words=("notebook", NOT_A_NOTEBOOK)),
    wrong("labkit.course.slides.too_tall", words=("path",)),
    wrong("labkit.course.solutions.hide_solutions", words=("path",)),
    wrong("labkit.course.solutions.solution_cells", words=("cells",)),
    wrong("labkit.course.student.student_copy", words=("notebook", NOT_A_NOTEBOOK)),
    wrong("labkit.course.student.write_student_copies", words=("paths",)),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.course.glossary.GLOSSARY": "a constant: the terms the site's glossary page lists, not a call",
}
