"""The site's pages made readable without sight and without a mouse: an alt text on every figure, and the
markup axe-core (tests/browser/test_site.py) asks for beyond what Sphinx and Furo write.

An image's alt is the one labkit.viz gave it (labkit.viz.alt, saved in the output's metadata), else
"Figure: " and the cell's first comment or the section it sits in (`fallback_alt`). MyST-NB names each image
file by the sha256 of its bytes (`image_name`) and takes no alt from an output's metadata: it writes the
file's path in the alt instead. So the site collects {image file name: alt text} while it prepares the pages
(labkit.course.site), and `finish_pages` writes each alt into its <img> after the build, together with
ACCESSIBLE_MARKUP's changes: focusable scrolling blocks, named <aside>s, no empty header cell.

    >>> alt_texts_in('<img alt="_images/' + "0" * 64 + '.png" src="...">', {"0" * 64: "Bars & a line"})
    ('<img alt="Bars &amp; a line" src="...">', 1)
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from pathlib import Path

from labkit.core.doors import check_table, described
from labkit.course.notebook_file import check_path
from labkit.course.solutions import text

__all__ = ["accessible_markup", "finish_pages"]

# What finish_pages changes on every built page, for axe-core's checks (https://dequeuniversity.com/rules/axe/):
# - wide code, outputs and tables scroll, so a keyboard must be able to focus them (scrollable-region-focusable);
# - Furo's two <aside>s, the course's contents and the page's own, need names that tell them apart
#   (landmark-unique);
# - a table's empty corner cell is no header (empty-table-header): it becomes a plain cell.
ACCESSIBLE_MARKUP = (
    (re.compile(r"<pre>"), '<pre tabindex="0">'),
    (re.compile(r'<div class="table-wrapper'), '<div tabindex="0" class="table-wrapper'),
    (
        re.compile(r'<aside class="sidebar-drawer">'),
        '<aside class="sidebar-drawer" aria-label="Course contents">',
    ),
    (re.compile(r'<aside class="toc-drawer'), '<aside aria-label="On this page" class="toc-drawer'),
    (re.compile(r'<th( class="[^"]*")?>\s*(<p>\s*</p>)?\s*</th>'), r"<td\1></td>"),
)


def fallback_alt(cell: dict, section: str) -> str:
    """'Figure: ' and the code cell's first comment, else the section the cell sits in."""
    comment = next(
        (line.lstrip("# ").strip() for line in text(cell).splitlines() if line.startswith("#")), ""
    )
    return f"Figure: {comment or section}"


def image_name(data: str | list[str]) -> str:
    """The file name MyST-NB gives a saved PNG or JPEG (the sha256 of its bytes), without the extension."""
    return hashlib.sha256(base64.b64decode("".join(data))).hexdigest()


def alt_texts_in(page: str, alts: dict[str, str]) -> tuple[str, int]:
    """The page with each image's alt text in its <img> tag (MyST-NB writes the file's path there), and how
    many tags got one."""

    def replace(found: re.Match) -> str:
        alt = alts.get(found.group(2))
        return f'alt="{html.escape(alt)}"' if alt is not None else found.group(0)

    return re.subn(r'alt="(_images/)?([0-9a-f]{64})\.\w+"', replace, page)


def accessible_markup(page: str) -> str:
    """The built page with ACCESSIBLE_MARKUP's changes: focusable scrolling blocks, named asides, no empty
    header cell.

    >>> accessible_markup('<tr><th class="head"><p></p></th><th class="head"><p>OpenAI</p></th></tr>')
    '<tr><td class="head"></td><th class="head"><p>OpenAI</p></th></tr>'
    """
    if not isinstance(page, str):
        raise TypeError(f"page must be the HTML text of a built page, got {described(page)}.")
    for pattern, replacement in ACCESSIBLE_MARKUP:
        page = pattern.sub(replacement, page)
    return page


def finish_pages(out_dir: Path, alts: dict[str, str]) -> int:
    """What Sphinx leaves to do on the built pages: every image's alt text (`alt_texts_in`), and the markup
    axe-core asks for (`accessible_markup`); returns how many images were given an alt text."""
    out_dir = check_path("out_dir", out_dir)
    check_table("alts", alts, "alt texts (str) by image file name", of=str)
    given = 0
    for path in out_dir.glob("*.html"):
        page, count = alt_texts_in(path.read_text(encoding="utf-8"), alts)
        path.write_text(accessible_markup(page), encoding="utf-8")
        given += count
    return given
