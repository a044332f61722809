"""The course's site in Chromium, opened from the file system with every request off the machine refused:
the home page and three notebook pages show, the offline search finds ten course terms and a result opens, a
glossary link opens its notebook at the section that teaches the term, axe-core (unpacked from npm by `make
site-vendor`) finds no violation of any impact on any page, and at a phone's width (375 CSS pixels) the home
page and a notebook page fit the screen, with nothing to scroll sideways, and pass axe-core too."""

import re
from pathlib import Path

import pytest

from labkit.course.glossary import GLOSSARY

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
AXE = ROOT / "build" / "vendor" / "axe-core-4.14.1" / "axe.min.js"  # the version the Makefile pins
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")
PAGES = ["02_the_generation_loop", "04_sampling", "10_batching"]
SEARCHED = [
    "tokenizer",
    "beam search",
    "temperature",
    "KV cache",
    "prefill",
    "quantization",
    "NF4",
    "speculative decoding",
    "continuous batching",
    "goodput",
]
# a phone's screen in CSS pixels (an iPhone's, the narrowest common one)
PHONE = {"width": 375, "height": 812}
# What a reader could scroll sideways: the document, or a box around the article that scrolls (Furo's
# .content does, and the document does not); wide code and tables scroll inside their own boxes, which is fine.
SIDEWAYS_SCROLL = """() => {
  const boxes = [document.scrollingElement];
  for (let box = document.querySelector('article'); box; box = box.parentElement)
    if (['auto', 'scroll'].includes(getComputedStyle(box).overflowX)) boxes.push(box);
  return boxes.filter(box => box.scrollWidth > box.clientWidth)
              .map(box => `${box.tagName}.${box.className}: ${box.scrollWidth} > ${box.clientWidth} px`);
}"""


@pytest.fixture(scope="module")
def site(course_site) -> Path:
    return course_site  # tests/conftest.py builds it


def axe_violations(tab, axe: Path) -> list[dict]:
    """axe-core's violations on the tab's page: [{id, impact, nodes}] (nodes: how many elements).

    Every rule runs; resultTypes only spares axe-core listing every element that passed (it keeps one
    of each passed or incomplete rule), while each violation keeps all its elements."""
    tab.add_script_tag(path=str(axe))
    return tab.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
        ".map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.length}))"
    )


@pytest.fixture
def tab(browser_context):
    """A fresh tab that refuses every request leaving the machine and records every request it makes."""
    page = browser_context.new_page()
    page.requests = []
    page.on("request", lambda request: page.requests.append(request.url))
    page.route(re.compile(r"^(?!file:|data:|blob:|about:)"), lambda route: route.abort())
    yield page
    page.close()
    assert [url for url in page.requests if not url.startswith(LOCAL_SCHEMES)] == []


def test_the_home_page_and_three_notebook_pages_show(tab, site):
    tab.goto((site / "index.html").as_uri())
    assert tab.locator("h1").first.inner_text().startswith("LLM Inference Lab")
    assert tab.locator("article table a").count() == len(NOTEBOOKS)  # the course map
    for stem in PAGES:
        tab.locator(f"article table a[href='{stem}.html']").click()
        assert tab.url.endswith(f"{stem}.html")
        assert tab.locator("article h1").first.inner_text().startswith(stem[:2])
        assert tab.get_by_text("Run it yourself").first.is_visible()
        image = tab.locator("article img").first
        assert image.evaluate("img => img.complete && img.naturalWidth > 0")
        assert image.get_attribute("alt").strip()
        if stem == "04_sampling":  # its formulas, typeset by the site's own MathJax
            tab.locator("mjx-container svg").first.wait_for(timeout=20_000)
        tab.goto((site / "index.html").as_uri())


@pytest.mark.parametrize("term", SEARCHED)
def test_the_offline_search_finds_a_course_term_where_it_is_taught(tab, site, term):
    tab.goto((site / "search.html").as_uri() + f"?q={term.replace(' ', '+')}")
    results = tab.locator("#search-results ul.search li a")
    results.first.wait_for(timeout=20_000)
    hrefs = [
        href.split("?")[0].split("#")[0] for href in results.evaluate_all("links => links.map(a => a.href)")
    ]
    assert (site / f"{GLOSSARY[term].notebook}.html").as_uri() in hrefs
    results.first.click()
    tab.wait_for_load_state()
    assert tab.url.split("?")[0].split("#")[0] in hrefs
    assert term.lower().split()[0] in tab.locator("article").inner_text().lower()


def test_a_glossary_link_opens_the_notebook_at_the_section_that_teaches_the_term(tab, site):
    entry = GLOSSARY["KV cache"]
    tab.goto((site / "glossary.html").as_uri())
    tab.locator("dt", has=tab.get_by_text("KV cache", exact=True)).locator(
        "xpath=following-sibling::dd[1]//a"
    ).click()
    tab.wait_for_load_state()
    anchor = tab.url.split("#")[1]
    assert tab.url.split("#")[0] == (site / f"{entry.notebook}.html").as_uri()
    assert tab.locator(f"section[id='{anchor}'] > h2").first.inner_text().startswith(entry.section)
    # The browser scrolls to the section once the images above it have their heights: wait for that.
    tab.wait_for_function(
        "id => { const top = document.getElementById(id).getBoundingClientRect().top;"
        " return top >= 0 && top < window.innerHeight / 2; }",
        arg=anchor,
        timeout=20_000,
    )


def test_axe_finds_no_violation_on_any_page(tab, site, record_property, site_vendor):
    axe = site_vendor(AXE)
    found = {}
    for page in sorted(site.glob("*.html")):
        tab.goto(page.as_uri())
        found[page.name] = axe_violations(tab, axe)
        print(page.name, [(v["id"], v["impact"], v["nodes"]) for v in found[page.name]] or "no violation")
    record_property("axe", found)
    assert {name: violations for name, violations in found.items() if violations} == {}


@pytest.mark.parametrize("stem", ["index", "04_sampling"])
def test_at_a_phones_width_a_page_fits_the_screen_and_axe_finds_no_violation(tab, site, site_vendor, stem):
    axe = site_vendor(AXE)
    tab.set_viewport_size(PHONE)
    tab.goto((site / f"{stem}.html").as_uri())
    if stem == "04_sampling":  # typeset formulas are wider than their TeX: measure after MathJax ran
        tab.locator("mjx-container svg").first.wait_for(timeout=20_000)
    assert tab.locator("article h1").first.is_visible()
    assert tab.evaluate("() => window.innerWidth") == PHONE["width"]
    assert tab.evaluate(SIDEWAYS_SCROLL) == []
    assert axe_violations(tab, axe) == []
