"""A static deck from `make slides` opens offline: reveal.js, MathJax and the widget renderer come from
slides/vendor/, and no request leaves the machine."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "slides" / "vendor"
NOTEBOOK = ROOT / "notebooks" / "04_sampling.ipynb"  # maths, figures and saved widget state
LOCAL_SCHEMES = ("file:", "data:", "blob:")


@pytest.fixture(scope="module")
def deck(tmp_path_factory) -> Path:
    """Notebook 04 converted with the offline settings, next to a link to the unpacked vendor folder."""
    if not (VENDOR / ".complete").exists():
        message = "slides/vendor/ is missing: run `make slides` once (it unpacks reveal.js & co. from npm)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the static-deck test must run in CI, but {message}", pytrace=False)
        pytest.skip(message)
    folder = tmp_path_factory.mktemp("deck")
    (folder / "vendor").symlink_to(VENDOR)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--config",
            "slides/offline_decks.py",
            "--to",
            "slides",
            "--output-dir",
            str(folder),
            str(NOTEBOOK),
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    return folder / f"{NOTEBOOK.stem}.slides.html"


def test_a_static_deck_renders_offline(browser_context, deck):
    page = browser_context.new_page()
    requests, errors = [], []
    page.on("request", lambda request: requests.append(request.url))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(deck.as_uri())
        page.locator(".reveal.ready").wait_for(timeout=30_000)  # reveal.js loaded through require.js
        # MathJax typeset the formulas
        page.locator(".MathJax_CHTML").first.wait_for(state="attached", timeout=30_000)
        # widgets drawn from saved state
        page.locator(".widget-slider").first.wait_for(state="attached", timeout=30_000)
        slides = sum(
            cell["metadata"].get("slideshow", {}).get("slide_type") == "slide"
            for cell in json.loads(NOTEBOOK.read_text())["cells"]
        )
        assert page.locator(".reveal .slides > section").count() >= slides
    finally:
        page.close()
    assert [url for url in requests if not url.startswith(LOCAL_SCHEMES)] == []
    assert errors == []
