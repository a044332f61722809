"""The course as a website: the student copies of the notebooks as static pages, searchable offline.

`make site` writes site/ (not committed): a home page with the course map, one page per notebook, a
glossary, and full-text search; open site/index.html from the file system, or serve the folder with
`python -m http.server -d site`. Nothing is executed and nothing is fetched: each page is the notebook's
saved outputs, as the student's copy has them (labkit.course.student: no worked solution, instructor
note, checker verdict or saved reveal), prepared here for a page that has no kernel:
- a widget's live view is dropped and its static fallback (the text it saves beside the view) stays;
- every figure's <img> has an `alt`: the one labkit.viz gave it, else one the build makes up; MyST-NB takes
  no alt from an output's metadata, so the build writes them in afterwards (labkit.course.accessibility);
- under each notebook's title, a "Run it yourself" box with the course's two commands;
- formulas typeset by MathJax, unpacked from npm once (`make site-vendor`) and copied into the site;
- the glossary links each term to the section that teaches it (labkit.course.glossary names its heading):
  MyST gives every heading an anchor, the docutils slug Sphinx also uses as the section's id, so a link
  `06_kv_cache.ipynb#why-recomputation-is-quadratic` resolves at build time, or the build warns;
- what axe-core (tests/browser/test_site.py) asks for beyond Furo's markup, written in after the build
  (labkit.course.accessibility), and a title on the search page (SEARCH_PAGE).

Why Sphinx with MyST-NB (both from PyPI, pinned in pyproject.toml's `site` extra) and the Furo theme: it
builds from the saved outputs with no network (measured on a 2-core machine: 17 notebooks in about 10 s),
and its search is a JavaScript index loaded as a script, so it works from file://. Jupyter Book 2 (mystmd,
npm) fetches its HTML theme from the internet at build time ("Querying template metadata from
api.mystmd.org"); Quarto's PyPI package downloads the Quarto binary when it installs. Both are out.

    >>> build_site(sorted(Path("notebooks").glob("[0-9][0-9]_*.ipynb")), "site")
    PosixPath('site/index.html')
    $ python -m labkit.course.site --out site notebooks/[0-9][0-9]_*.ipynb
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from myst_parser.slugs import docutils_slugify

from labkit.course.accessibility import fallback_alt, finish_pages, image_name
from labkit.course.glossary import GLOSSARY
from labkit.course.notebook_file import check_path, check_paths, read_notebook
from labkit.course.solutions import text
from labkit.course.student import student_copy

__all__ = ["build_site"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml")
SOURCE_DIR = Path("build/site-source")  # the pages' sources, written anew by every build
MATHJAX = Path("build/vendor/mathjax-3.2.2/es5")  # unpacked from npm by `make site-vendor`
# MathJax's SVG output carries its glyphs in the script: no web font to load (Chromium refuses a font from
# file://); TeX's extensions (input/) and the menu (ui/, a11y/) load on demand from beside it.
MATHJAX_PARTS = ("tex-svg.js", "input", "ui", "a11y")
RUN_IT_YOURSELF = """```{admonition} Run it yourself
:class: tip

This page shows the notebook as it was last run. To run it, and move its sliders, in a clone of the course:

    make lab    # set everything up, then open JupyterLab on your copy of the first notebook
    make test   # set everything up, then run every test, notebooks included
```
"""
CONF = """# Written by labkit.course.site: the course's site, built from saved outputs, offline.
project = "LLM Inference Lab"
html_title = "LLM Inference Lab"
extensions = ["myst_nb"]
myst_enable_extensions = ["deflist", "dollarmath", "amsmath"]  # the glossary's terms; the notebooks' $formulas$
myst_heading_anchors = 6  # links to a section (the glossary's) resolve, or warn, at build time
myst_heading_slug_func = "docutils"  # the slug is the id Sphinx gives the section: one id per heading
html_static_path = ["_static"]
templates_path = ["_templates"]  # the search page, with a title (SEARCH_PAGE)
mathjax_path = "mathjax/tex-svg.js"  # in _static: MathJax from npm (`make site-vendor`), not from a CDN
nb_execution_mode = "off"  # the saved outputs, never re-executed
nb_ipywidgets_js = {}  # no widget manager from a CDN: widgets show their static fallbacks
html_theme = "furo"
html_theme_options = {"top_of_page_buttons": []}
html_copy_source = False
html_show_sourcelink = False
html_show_copyright = False  # no owner line: the footer said "Copyright ©" and nothing more
html_last_updated_fmt = None
exclude_patterns = ["_build"]
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type", "misc.highlighting_failure"]
"""
# Furo's search page has no <h1>, so a screen reader's list of headings is empty until a search has run
# (axe-core's page-has-heading-one); Sphinx's script then adds its results under an <h2>.
SEARCH_PAGE = """{% extends "!search.html" %}
{% block content %}<h1>{{ _("Search") }}</h1>{{ super() }}{% endblock %}
"""


def notebook_title(notebook: dict) -> str:
    """The text of the notebook's first level-1 heading, e.g. '04 · Sampling: temperature, ...'."""
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown" and (found := re.search(r"^# (.+)$", text(cell), re.MULTILINE)):
            return found.group(1).strip()
    raise ValueError("notebook has no level-1 heading ('# ...') to title its page with.")


def page_outputs(cell: dict, section: str, alts: dict[str, str]) -> None:
    """Drop widget views (the text fallback beside each stays) and give every image an alt text, in place;
    alts gets {image file name: alt text}."""
    kept = []
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        data.pop(WIDGET_VIEW, None)
        if "data" in output and not data:
            continue
        for mime in IMAGE_TYPES:
            if mime in data:
                metadata = output.setdefault("metadata", {}).setdefault(mime, {})
                metadata.setdefault("alt", fallback_alt(cell, section))
                if mime != "image/svg+xml":
                    alts[image_name(data[mime])] = metadata["alt"]
        kept.append(output)
    cell["outputs"] = kept


def site_notebook(notebook: dict, alts: dict[str, str]) -> dict:
    """The page's notebook: the student copy, without live widgets, every image with an alt text (also
    written to `alts`), and the "Run it yourself" box after the title cell."""
    page = student_copy(notebook)
    page.setdefault("metadata", {}).pop("widgets", None)
    section = notebook_title(page)
    for cell in page["cells"]:
        if cell["cell_type"] == "markdown" and (heading := re.search(r"^#+ (.+)$", text(cell), re.MULTILINE)):
            section = heading.group(1).strip()
        if cell["cell_type"] == "code":
            page_outputs(cell, section, alts)
    page["cells"].insert(
        1, {"cell_type": "markdown", "id": "run-it-yourself", "metadata": {}, "source": RUN_IT_YOURSELF}
    )
    return page


def course_map(pages: dict[str, str], readme: str) -> str:
    """The home page's table: each notebook's page and what you learn there (the README's curriculum)."""
    learn = dict(re.findall(r"^\| \d\d \| `(\w+)` \| ([^|]+) \|", readme, re.MULTILINE))
    rows = [f"| [{title}]({stem}.ipynb) | {learn.get(stem, '').strip()} |" for stem, title in pages.items()]
    return "| notebook | you learn to |\n|---|---|\n" + "\n".join(rows)


def home_page(pages: dict[str, str], readme: str) -> str:
    """index.md: what the course is, how to run it, the course map, and the table of contents."""
    intro = readme.split("\n## ", 1)[0].split("\n", 1)[1].strip()
    toctree = "\n".join([*pages, "glossary"])
    return (
        f"# LLM Inference Lab\n\n{intro}\n\n{RUN_IT_YOURSELF}\n## Course map\n\n{course_map(pages, readme)}\n\n"
        f"Terms used across the course: the [glossary](glossary.md).\n\n"
        f"```{{toctree}}\n:hidden:\n:maxdepth: 1\n\n{toctree}\n```\n"
    )


def notebook_headings(notebook: dict) -> list[str]:
    """The text of every heading in the notebook's markdown cells, in order, without the #s."""
    return [
        heading.strip()
        for cell in notebook["cells"]
        if cell["cell_type"] == "markdown"
        for heading in re.findall(r"^#+ (.+)$", text(cell), re.MULTILINE)
    ]


def section_anchor(headings: list[str], section: str) -> str:
    """The id the page gives the section headed `section` (MyST's docutils slug, Sphinx's id for the section:
    what is not a letter or digit drops, and the number in front, '5. Context length' -> 'context-length').

    >>> section_anchor(["01 · Tokens", "5. Context length"], "5. Context length")
    'context-length'
    """
    if section not in headings:
        raise ValueError(f"section must be one of the notebook's headings {headings}; got {section!r}.")
    anchor = docutils_slugify(section)
    # the later ones get other ids (context-length-1)
    if [docutils_slugify(heading) for heading in headings].count(anchor) > 1:
        raise ValueError(
            f"section {section!r} shares its id {anchor!r} with another heading; give it another."
        )
    return anchor


def glossary_page(pages: dict[str, str], headings: dict[str, list[str]]) -> str:
    """glossary.md: every term of labkit.course.glossary taught in one of the site's notebooks, with its
    meaning and a link to the section that teaches it (pages: {notebook: title}, headings: {notebook: its
    headings})."""
    entries = []
    for name, entry in sorted(GLOSSARY.items(), key=lambda item: item[0].lower()):
        if entry.notebook not in pages:
            continue  # a site of some of the notebooks: no page to link to
        anchor = section_anchor(headings[entry.notebook], entry.section)
        entries.append(
            f"**{name}**\n: {entry.meaning} Taught in [{pages[entry.notebook]} › {entry.section}]"
            f"({entry.notebook}.ipynb#{anchor}).\n"
        )
    return "# Glossary\n\n" + "\n".join(entries)


def copy_mathjax(mathjax: Path, source_dir: Path) -> None:
    """Copy the parts of MathJax the pages load (MATHJAX_PARTS) into the site's _static/mathjax."""
    if not (mathjax / MATHJAX_PARTS[0]).is_file():
        raise ValueError(
            f"mathjax must be MathJax 3's es5 folder, unpacked from npm by `make site-vendor`; "
            f"{str(mathjax)!r} has no {MATHJAX_PARTS[0]}."
        )
    target = source_dir / "_static" / "mathjax"
    target.mkdir(parents=True)
    for part in MATHJAX_PARTS:
        copy = shutil.copytree if (mathjax / part).is_dir() else shutil.copy2
        copy(mathjax / part, target / part)


def write_sources(paths: list[Path], source_dir: Path, readme: str) -> dict[str, str]:
    """Write the pages' sources (conf.py, index.md, glossary.md, one .ipynb per notebook, the search page's
    template) to source_dir, once every notebook is read and checked; returns {image file name: alt text}."""
    notebooks = [read_notebook(path, f"paths[{index}]") for index, path in enumerate(paths)]
    shutil.rmtree(source_dir, ignore_errors=True)
    source_dir.mkdir(parents=True)
    pages, headings, alts = {}, {}, {}
    for path, notebook in zip(paths, notebooks):
        page = site_notebook(notebook, alts)
        pages[path.stem], headings[path.stem] = notebook_title(page), notebook_headings(page)
        (source_dir / path.name).write_text(json.dumps(page, ensure_ascii=False), encoding="utf-8")
    (source_dir / "conf.py").write_text(CONF, encoding="utf-8")
    (source_dir / "index.md").write_text(home_page(pages, readme), encoding="utf-8")
    (source_dir / "glossary.md").write_text(glossary_page(pages, headings), encoding="utf-8")
    (source_dir / "_templates").mkdir()
    (source_dir / "_templates" / "search.html").write_text(SEARCH_PAGE, encoding="utf-8")
    return alts


def check_not_over_sources(name: str, folder: Path, sources: list[Path]) -> None:
    """Refuse a folder the build replaces (out_dir, source_dir: deleted, then written) that is or holds one of
    its own sources: `--out notebooks` or `--out .` would delete the notebooks it builds from."""
    target = folder.resolve()
    held = [
        str(source) for source in sources if source.resolve() == target or target in source.resolve().parents
    ]
    if held:
        raise ValueError(
            f"{name} {str(folder)!r} is replaced by the build but holds its sources ({held[0]}); "
            f"give a folder of its own, e.g. 'site'."
        )


def site_arguments(
    paths: object, out_dir: object, source_dir: object, readme: object, mathjax: object
) -> tuple[list[Path], Path, Path, Path, Path]:
    """build_site's arguments as Paths, checked before anything is deleted or written: notebook files to
    build from, and no folder the build replaces that holds one of its sources."""
    paths = check_paths("paths", paths)
    out_dir, source_dir = check_path("out_dir", out_dir), check_path("source_dir", source_dir)
    readme, mathjax = check_path("readme", readme), check_path("mathjax", mathjax)
    if not paths:
        raise ValueError("paths must name at least one notebook, e.g. notebooks/[0-9][0-9]_*.ipynb.")
    missing = [str(path) for path in paths if path.suffix != ".ipynb" or not path.is_file()]
    if missing:
        raise ValueError(f"paths must be notebook files (.ipynb); not found or not notebooks: {missing}.")
    for name, folder in (("out_dir", out_dir), ("source_dir", source_dir)):
        check_not_over_sources(name, folder, [*paths, readme, mathjax])
    return paths, out_dir, source_dir, readme, mathjax


def build_site(
    paths: list[str | Path],
    out_dir: str | Path,
    source_dir: str | Path = SOURCE_DIR,
    readme: str | Path = "README.md",
    mathjax: str | Path = MATHJAX,
) -> Path:
    """Build the site of the notebooks in `paths` into out_dir (replaced); returns its home page."""
    paths, out_dir, source_dir, readme, mathjax = site_arguments(paths, out_dir, source_dir, readme, mathjax)
    alts = write_sources(paths, source_dir, readme.read_text(encoding="utf-8"))
    copy_mathjax(mathjax, source_dir)
    # Sphinx writes into the source folder, and MyST-NB its copies of the notebooks beside Sphinx's output
    # folder (jupyter_execute/): both stay in source_dir, and the finished site is moved to out_dir.
    html_dir, doctrees = source_dir / "_build" / "html", source_dir / "_doctrees"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-b",
            "html",
            "-q",
            "-E",
            "-d",
            str(doctrees),
            str(source_dir),
            str(html_dir),
        ],
        check=True,
    )
    finish_pages(html_dir, alts)
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(html_dir, out_dir)
    return out_dir / "index.html"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Build the course's static site from the saved notebooks.")
    parser.add_argument(
        "notebooks", nargs="+", help="the course's notebooks, e.g. notebooks/[0-9][0-9]_*.ipynb"
    )
    parser.add_argument("--out", default="site", help="the folder to write the site to (default: site)")
    arguments = parser.parse_args()
    print(f"wrote {build_site(arguments.notebooks, arguments.out)}")
