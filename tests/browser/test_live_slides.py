"""The live slide path: `make present` serves a notebook as reveal.js slides through Voila, with a kernel
behind them, so the widgets respond during the talk.

Voila runs every cell of notebook 04 when the deck is requested, then sends the slides. The test pages
to the "Move the sliders" slide with the arrow key, drags the temperature slider and checks that the
kernel redraws the plot. The course's template (slides/voila/templates/offline-reveal) takes every file
from this machine: nothing may be fetched from elsewhere, and the console may show no error at all, on
any slide the test passes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from .conftest import ROOT, free_port
from .test_jupyterlab import assert_no_console_errors, assert_temperature_slider_redraws, cell_index

try:
    from playwright.sync_api import expect
except ImportError:  # the fixtures skip these tests (in CI: fail them) with how to install playwright
    pass

pytestmark = pytest.mark.browser

NOTEBOOK = "04_sampling.ipynb"
VENDOR = ROOT / "slides" / "vendor"
START_TIMEOUT_S = 90  # Voila's server, not the notebook
DECK_TIMEOUT_MS = 600_000  # Voila runs the whole notebook before the page ends (about 2 minutes for 04)
LOCAL_PREFIXES = ("http://127.0.0.1:", "data:", "blob:")
FONT_AWESOME_CSS = "fortawesome-fontawesome-free-5.15.4/css/all.min.css"


def stop_process_group(process: subprocess.Popen) -> None:
    """SIGTERM the process group of `process` (make and Voila; Voila's kernel exits with its parent),
    then SIGKILL it if it hangs."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def present(tmp_path_factory) -> Iterator[str]:
    """`make present` on a free port of 127.0.0.1 (its set-up steps taken as done: the test suite runs
    after them); yields the server's address."""
    if not (VENDOR / ".complete").exists():
        message = (
            "slides/vendor/ is missing: run `make slides-vendor` once (it unpacks reveal.js & co. from npm)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"the live-slides test must run in CI, but {message}", pytrace=False)
        pytest.skip(message)
    port = free_port()
    log = tmp_path_factory.mktemp("present") / "voila.log"
    command = [
        "make",
        "--no-print-directory",
        "-o",
        "cache",
        "-o",
        "slides/vendor/.complete",
        "present",
        f"PRESENT_OPTIONS=--port={port} --Voila.ip=127.0.0.1",
    ]
    with log.open("wb") as output:
        # its own process group, stopped as one
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            # the quick run `make test` sets: the deck's timing cells run fewer repeats (no test reads them)
            env=dict(os.environ, LABKIT_QUICK="1"),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            pytest.fail(f"`make present` exited with code {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"{url}/", timeout=10).close()
            break
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                stop_process_group(process)
                pytest.fail(f"Voila did not answer within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
    yield url
    stop_process_group(process)


def test_notebook_04_live_slides_temperature_slider_redraws_the_plot(browser_tab, present, console_errors):
    page = browser_tab  # a tab of its own: no JupyterLab started for it
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(f"{present}/voila/render/notebooks/{NOTEBOOK}", timeout=DECK_TIMEOUT_MS)

    # A reveal.js deck on its first slide, one top-level section per "slide" cell.
    expect(page.locator(".reveal.ready")).to_be_attached()
    cells = json.loads((ROOT / "notebooks" / NOTEBOOK).read_text())["cells"]
    sections = page.locator(".reveal .slides > section")
    expect(sections).to_have_count(
        sum(c["metadata"].get("slideshow", {}).get("slide_type") == "slide" for c in cells)
    )
    expect(page.locator(".reveal .slides > section.present h1").first).to_contain_text("04 · Sampling")
    expect(page.locator(".reveal mjx-container").first).to_be_attached()  # the formulas are typeset

    # Page forward with the arrow key to the slide holding the explorer (Voila numbers cells from 1).
    explorer = page.locator(f'[cell-index="{cell_index(NOTEBOOK, "widgets.sampling_explorer(") + 1}"]')
    on_screen = page.locator(".reveal .slides > section.present").filter(has=explorer)
    for _ in cells:  # each press shows the next fragment or slide, and reveal.js puts it in the URL
        if on_screen.count():
            break
        url = page.url
        page.keyboard.press("ArrowRight")
        expect(page).not_to_have_url(url)
    expect(on_screen.locator("h2").first).to_contain_text("Move the sliders")

    # The widget came from the kernel that ran the notebook: moving the slider redraws the plot.
    assert_temperature_slider_redraws(explorer)

    remote = [url for url in requests if not url.startswith(LOCAL_PREFIXES)]
    assert not remote, f"requests left the machine: {remote}"
    assert any(url.endswith(FONT_AWESOME_CSS) for url in requests), (
        "Font Awesome did not come from slides/vendor/"
    )
    assert_no_console_errors(console_errors)
