"""The course's site (labkit.course.site) shows the student's view: no worked solution, instructor note,
saved checker verdict or saved reveal reaches a page; every notebook is a page with a Run-it-yourself
box, every figure has an alt text, widgets show their fallbacks, nothing is loaded from the internet, and
each glossary term links to the section that teaches it. The markup axe-core asks for is checked here as
text; tests/browser/test_site.py runs axe-core itself."""

import html
import json
import re
from pathlib import Path

import pytest

from labkit.course.accessibility import accessible_markup
from labkit.course.glossary import GLOSSARY
from labkit.course.site import notebook_title, section_anchor
from labkit.course.solutions import SOLUTION_TAG, tags, text
from labkit.course.student import (
    INSTRUCTOR_NOTE,
    is_checker_cell,
    is_instructor_note,
    is_reveal_cell,
    student_copy,
)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MIN_CHARS = 25  # a line shorter than this (`x = 1`, a bare number) could appear on a page by chance


@pytest.fixture(scope="module")
def site(course_site) -> Path:
    return course_site  # tests/conftest.py builds it


def page_text(path: Path) -> str:
    """A built page's visible text: tags dropped, entities decoded, white space collapsed."""
    content = re.sub(r"<(script|style)\b.*?</\1>", " ", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", content)).split())


def output_text(cell: dict) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append("".join(output.get("text", "")))
        for mime in ("text/plain", "text/markdown", "text/html"):
            parts.append("".join(output.get("data", {}).get(mime, "")))
    return "\n".join(parts)


def hidden_lines(notebooks: list[dict]) -> set[str]:
    """Lines the student copies hide (solutions, instructor notes, verdicts and reveals saved in the
    instructor's copies) and do not also show elsewhere (one notebook may print a table another one's
    checker prints), each long enough not to appear by chance."""
    shown = " ".join(
        text(cell) + "\n" + output_text(cell)
        for notebook in notebooks
        for cell in student_copy(notebook)["cells"]
    )
    shown = " ".join(shown.split())
    hidden = []
    for cell in (cell for notebook in notebooks for cell in notebook["cells"]):
        if SOLUTION_TAG in tags(cell) or is_instructor_note(cell):
            hidden += text(cell).splitlines()
        if is_checker_cell(cell) or is_reveal_cell(cell):
            hidden += output_text(cell).splitlines()
    lines = {" ".join(line.split()) for line in hidden}
    return {line for line in lines if len(line) >= MIN_CHARS and line not in shown}


def test_no_solution_note_verdict_or_reveal_reaches_a_page(site):
    pages = {path.name: page_text(path) for path in site.glob("*.html")}
    notebooks = [json.loads(path.read_text(encoding="utf-8")) for path in NOTEBOOKS]
    looked_for = hidden_lines(notebooks)
    assert len(looked_for) > 50  # the instructor's copies do hide something: the test looks for it
    leaks = [(name, line) for line in looked_for for name, content in pages.items() if line in content]
    assert leaks == []
    assert not any(INSTRUCTOR_NOTE in content or "BEGIN SOLUTION" in content for content in pages.values())


def test_every_notebook_is_a_page_with_its_title_and_the_two_commands(site):
    for path in NOTEBOOKS:
        content = page_text(site / f"{path.stem}.html")
        assert notebook_title(json.loads(path.read_text(encoding="utf-8"))) in content
        assert "Run it yourself" in content and "make lab" in content and "make test" in content
    home = (site / "index.html").read_text(encoding="utf-8")
    assert all(f'href="{path.stem}.html"' in home for path in NOTEBOOKS)  # the course map


def test_every_figure_has_an_alt_text_and_widgets_show_their_fallbacks(site):
    images = [tag for page in site.glob("*.html") for tag in re.findall(r"<img\b[^>]*>", page.read_text())]
    figures = (
        sum(  # every figure a student copy keeps (a locked prediction's figures wait for the student's run)
            "image/png" in output.get("data", {})
            for path in NOTEBOOKS
            for cell in student_copy(json.loads(path.read_text(encoding="utf-8")))["cells"]
            for output in cell.get("outputs", [])
        )
    )
    assert figures >= 30 and len(images) >= figures, (len(images), figures)
    alts = [re.search(r'alt="([^"]*)"', tag) for tag in images]
    assert all(alt and alt.group(1).strip() and "_images/" not in alt.group(1) for alt in alts)
    quantization = page_text(site / "08_quantization.html")
    assert "QuantSlider(bits, group size; run the notebook to move the sliders)" in quantization
    assert not any("widget-view+json" in page.read_text() for page in site.glob("*.html"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem[:2])
def test_every_saved_figure_carries_its_own_alternative_text(path):
    """Every image a notebook saved has the alt labkit.viz gave it (not the site's "Figure:" stand-in):
    a notebook re-executed since labkit.viz.alt (`make notebooks`) describes every figure it shows."""
    outputs = [
        output
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]
        for output in cell.get("outputs", [])
        if "image/png" in output.get("data", {})
    ]
    missing = [
        i
        for i, output in enumerate(outputs)
        if not output.get("metadata", {}).get("image/png", {}).get("alt")
    ]
    assert not missing, (
        f"{path.name}: figures {missing} of {len(outputs)} were saved without an alt: re-execute it"
    )


def test_nothing_is_loaded_from_the_internet_and_formulas_are_typeset_by_the_sites_own_mathjax(site):
    for page in site.glob("*.html"):
        loaded = re.findall(r'<(?:script|img|link)\b[^>]*(?:src|href)="(https?:[^"]*)"', page.read_text())
        assert loaded == [], page.name
    sampling = (site / "04_sampling.html").read_text(encoding="utf-8")
    assert 'src="_static/mathjax/tex-svg.js' in sampling and r"\(p_i \propto e^{z_i / T}\)" in sampling
    assert (site / "_static" / "mathjax" / "tex-svg.js").is_file()


def heading_text(fragment: str) -> str:
    """A heading's text as the notebook writes it: tags dropped, entities decoded, no typographic quotes."""
    return (
        html.unescape(re.sub(r"<[^>]+>", "", fragment)).replace("\u2019", "'").replace("\u201c", '"').strip()
    )


def test_each_glossary_term_links_to_the_section_that_teaches_it(site):
    glossary = (site / "glossary.html").read_text(encoding="utf-8")
    entries = dict(re.findall(r"<dt><strong>(.*?)</strong></dt>\s*<dd>(.*?)</dd>", glossary, re.DOTALL))
    assert sorted(entries) == sorted(html.escape(name, quote=False) for name in GLOSSARY)
    for name, entry in GLOSSARY.items():
        notebook = json.loads((ROOT / "notebooks" / f"{entry.notebook}.ipynb").read_text(encoding="utf-8"))
        assert name.lower() in " ".join(text(cell) for cell in notebook["cells"]).lower(), name
        link = re.search(rf'href="{entry.notebook}\.html#([\w-]+)"', entries[html.escape(name, quote=False)])
        assert link, name
        page = (site / f"{entry.notebook}.html").read_text(encoding="utf-8")
        heading = re.search(
            rf'<section id="{link.group(1)}">\s*<h[1-6]>(.*?)<a class="headerlink"', page, re.DOTALL
        )
        assert heading and heading_text(heading.group(1)) == entry.section, name


def test_every_link_of_the_glossary_resolves_to_an_id_on_its_page(site):
    links = re.findall(
        r'href="([\w.-]+\.html)#([^"]+)"', (site / "glossary.html").read_text(encoding="utf-8")
    )
    assert len(links) >= len(GLOSSARY)
    missing = [
        f"{page}#{anchor}"
        for page, anchor in links
        if f'id="{anchor}"' not in (site / page).read_text(encoding="utf-8")
    ]
    assert missing == []


def test_a_section_anchor_is_the_sections_id_and_a_wrong_section_is_refused():
    headings = ["06 · The KV cache", "1. Why recomputation is quadratic", "2. The cache in labkit's model"]
    assert section_anchor(headings, "2. The cache in labkit's model") == "the-cache-in-labkit-s-model"
    with pytest.raises(ValueError, match="section must be one of the notebook's headings"):
        section_anchor(headings, "3. Time per step")
    with pytest.raises(ValueError, match="shares its id 'recap'"):
        section_anchor(["Recap", "1. Recap"], "1. Recap")  # both would be id="recap"


def test_pages_name_their_asides_and_have_no_empty_header_cell(site):
    asides = re.findall(r"<aside\b[^>]*>", (site / "06_kv_cache.html").read_text(encoding="utf-8"))
    assert len(asides) == 2  # Furo's: the course's contents, and this page's
    for page in site.glob("*.html"):
        content = page.read_text(encoding="utf-8")
        assert all("aria-label=" in tag for tag in re.findall(r"<aside\b[^>]*>", content)), page.name
        assert not re.search(r"<th\b[^>]*>\s*(<p>\s*</p>)?\s*</th>", content), page.name
    assert "<h1>Search</h1>" in (site / "search.html").read_text(encoding="utf-8")
    corner = '<tr><th class="head"><p></p></th>\n<th class="head"><p>Ollama</p></th>'
    assert accessible_markup(corner) == '<tr><td class="head"></td>\n<th class="head"><p>Ollama</p></th>'
