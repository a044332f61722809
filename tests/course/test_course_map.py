"""The course map: notebook 00's tour, the README's curriculum and the notebooks on disk name the same
notebooks, and every reference in the notebooks' text to a notebook ("notebook 07", "notebooks 08-13")
or to a section ("notebook 10, section 1", "section 4 of notebook 10", "notebook 12 §8.3", "section 5")
points at one that exists. Only the notebooks' markdown is read: nothing runs, no model loads."""

import json
import re
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = {path.name[:2]: path for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
TOUR_HEADING = re.compile(r"## \d+\. The tour\b")
TITLE = re.compile(r"# (?P<number>\d\d) · (?P<title>[^:\n]+)")  # "# 03 · Deterministic decoding: greedy, ..."
# "## 5. The ..." or "### 8.3 The ..."
HEADING_NUMBER = re.compile(r"^#{2,4} (\d+(?:\.\d+)*)\.? ", re.MULTILINE)

# A list of numbers: "07", "07 and 10", "02, 06", "08-13", "2 (by hand) and 6 (the GGUF block)", "8.3".
LISTED = r"\d+(?:\.\d+)*(?:(?: \([^)]*\))?(?:, | and | or |-|–)\d+(?:\.\d+)*)*"
SECTION = r"(?:[Ss]ection |§ ?)(?P<section>\d+(?:\.\d+)*)"
SECTION_OF_NOTEBOOK = [
    # notebook 10, section 1; notebook 12 §8.3
    re.compile(r"\b[Nn]otebook (?P<notebook>\d\d)(?:, |'s | )" + SECTION),
    re.compile(r"\b" + SECTION + r",? of [Nn]otebook (?P<notebook>\d\d)"),  # section 4 of notebook 10
]
NOTEBOOKS_NAMED = re.compile(rf"\b[Nn]otebooks? (?P<listed>{LISTED})")
SECTIONS_ALONE = re.compile(rf"(?:\b[Ss]ections? |§ ?)(?P<listed>{LISTED})")


class Reference(NamedTuple):
    notebook: str  # "07"
    section: str | None  # "5", "8.3", or None for the notebook as a whole
    where: str  # "03_deterministic_decoding.ipynb cell 30: 'section 3'"


def markdown_cells(path: Path) -> list[tuple[int, str]]:
    """(index, text) of every markdown cell of the notebook at `path`."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(i, "".join(cell["source"])) for i, cell in enumerate(cells) if cell["cell_type"] == "markdown"]


def title(path: Path) -> str:
    """A notebook's title as its first heading gives it, up to any colon: "Deterministic decoding"."""
    match = TITLE.match(markdown_cells(path)[0][1])
    assert match and match["number"] == path.name[:2], (
        f"{path.name} does not open with '# {path.name[:2]} · Title'"
    )
    return match["title"].strip()


def section_numbers(path: Path) -> set[str]:
    """The numbers of a notebook's numbered headings: "5" for "## 5. ...", "8.3" for "### 8.3 ..."."""
    return {number for _, text in markdown_cells(path) for number in HEADING_NUMBER.findall(text)}


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the first markdown table in `text`, header and rule left out."""
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.lstrip().startswith("|")
    ]
    return [row for row in rows[1:] if not all(set(cell) <= set("-: ") for cell in row)]


def tour_rows() -> list[list[str]]:
    """The rows (number, notebook, question) of the table in notebook 00's tour section."""
    tours = [text for _, text in markdown_cells(NOTEBOOKS["00"]) if TOUR_HEADING.match(text)]
    assert len(tours) == 1, "notebook 00 should have one '## N. The tour' cell"
    return table_rows(tours[0])


def curriculum_rows() -> list[list[str]]:
    """The rows (number, notebook, you learn to, status) of the README's curriculum table."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "\n## Curriculum\n" in readme, "README.md has no '## Curriculum' section"
    return table_rows(readme.split("\n## Curriculum\n", 1)[1].split("\n## ", 1)[0])


def listed(text: str) -> list[str]:
    """The numbers in a list such as "07 and 10", "02, 06" or "08-13" (a range of whole numbers expanded)."""
    numbers = []
    for item in re.split(r", | and | or ", re.sub(r" \([^)]*\)", "", text)):
        ends = re.split(r"-|–", item)
        if len(ends) == 2 and all(end.isdigit() for end in ends):
            numbers += [str(n).zfill(len(ends[0])) for n in range(int(ends[0]), int(ends[1]) + 1)]
        else:
            numbers += ends
    return numbers


def references(text: str, here: str, where: str) -> list[Reference]:
    """The references in `text`, a markdown cell of notebook `here`: a section named with a notebook is
    that notebook's, a section named alone is `here`'s own."""
    found = []

    def section_of_notebook(match: re.Match) -> str:
        found.append(Reference(match["notebook"], match["section"], f"{where}: {match[0]!r}"))
        return " "

    for pattern in SECTION_OF_NOTEBOOK:
        text = pattern.sub(section_of_notebook, text)
    for match in NOTEBOOKS_NAMED.finditer(text):
        found += [Reference(number, None, f"{where}: {match[0]!r}") for number in listed(match["listed"])]
    for match in SECTIONS_ALONE.finditer(text):
        found += [Reference(here, number, f"{where}: {match[0]!r}") for number in listed(match["listed"])]
    return found


def all_references() -> list[Reference]:
    """Every reference in the markdown of every notebook."""
    return [
        reference
        for number, path in NOTEBOOKS.items()
        for i, text in markdown_cells(path)
        for reference in references(" ".join(text.split()), number, f"{path.name} cell {i}")
    ]


def test_tour_readme_and_disk_list_the_same_notebooks():
    on_disk = sorted(NOTEBOOKS)
    assert [row[0] for row in tour_rows()] == on_disk, (
        "notebook 00's tour should list every notebook, in order"
    )
    assert [row[0] for row in curriculum_rows()] == on_disk, (
        "README's curriculum should list every notebook, in order"
    )


def test_readme_curriculum_names_each_notebook_file():
    named = {row[0]: row[1].strip("`") for row in curriculum_rows()}
    wrong = [
        f"{number}: {name!r}, not {NOTEBOOKS[number].stem!r}"
        for number, name in named.items()
        if number in NOTEBOOKS and name != NOTEBOOKS[number].stem
    ]
    assert not wrong, "README's curriculum names notebooks that are not on disk:\n" + "\n".join(wrong)


def test_tour_names_each_notebook_by_its_title():
    wrong = [
        f"{number}: {name!r}, its title is {title(NOTEBOOKS[number])!r}"
        for number, name, *_ in tour_rows()
        if number in NOTEBOOKS and name != title(NOTEBOOKS[number])
    ]
    assert not wrong, "notebook 00's tour names notebooks otherwise than their titles:\n" + "\n".join(wrong)


def test_the_reference_finder_reads_every_form():
    """The patterns this file relies on, so that a check below cannot pass by finding nothing."""
    text = (
        "notebook 07, notebooks 08-10 and notebooks 02, 06; notebook 10, section 1; section 4 of notebook 11;"
        " notebook 12 §8.3; sections 2 (by hand) and 6"
    )
    assert [(r.notebook, r.section) for r in references(text, "05", "here")] == [
        ("10", "1"),
        ("12", "8.3"),
        ("11", "4"),
        ("07", None),
        ("08", None),
        ("09", None),
        ("10", None),
        ("02", None),
        ("06", None),
        ("05", "2"),
        ("05", "6"),
    ]
    assert HEADING_NUMBER.findall(
        "## 5. Load\n### 8.3 Base vs instruct\n### Reading the table\n## Exercise 1"
    ) == ["5", "8.3"]


def test_every_notebook_named_in_the_text_exists():
    broken = [reference.where for reference in all_references() if reference.notebook not in NOTEBOOKS]
    assert not broken, "references to notebooks that do not exist:\n" + "\n".join(broken)


def test_every_section_named_in_the_text_exists_in_its_notebook():
    sections = {number: section_numbers(path) for number, path in NOTEBOOKS.items()}
    broken = [
        f"{reference.where} (notebook {reference.notebook} has no section {reference.section})"
        for reference in all_references()
        if reference.section
        and reference.notebook in NOTEBOOKS
        and reference.section not in sections[reference.notebook]
    ]
    assert not broken, "references to sections that do not exist:\n" + "\n".join(broken)
