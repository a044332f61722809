"""Fixtures for the browser tests: the project's real JupyterLab, and a headless Chromium driving it.

The browser is Debian's Chromium (playwright's own browser download needs the network). Where it or
playwright is missing the tests are skipped with how to install them, except in CI (`CI=true`), where a
missing browser is a failure: CI must run them.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
# Headless, no GPU, and nothing that phones home: the page must only talk to the local JupyterLab.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL_HINT = (
    "install Chromium with `sudo apt-get install chromium chromium-driver` and playwright "
    "with `pip install playwright` (or `pip install -e '.[test]'`)"
)
LAB_START_TIMEOUT_S = 90
# The user settings the tests run JupyterLab with (a fresh folder, so a student's own settings never
# apply). Autosave is off so running cells in the browser never rewrites the committed notebooks, and
# JupyterLab asks no website for news or updates.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


def missing_browser(reason: str) -> None:
    """Skip the test with how to install what is missing; in CI (`CI=true`) fail it instead."""
    message = f"{reason}: {INSTALL_HINT}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"the browser tests must run in CI, but {message}", pytrace=False)
    pytest.skip(message)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_lab_settings(folder: Path) -> None:
    """Write LAB_SETTINGS as JupyterLab user-settings files under `folder`."""
    for name, values in LAB_SETTINGS.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


@dataclass
class Lab:
    """A running JupyterLab server: its address, token and process."""

    url: str  # e.g. http://127.0.0.1:8888
    token: str
    process: subprocess.Popen
    log: Path  # the server's stdout and stderr

    def workspace_url(self, workspace: str, notebook: str = "") -> str:
        """The address of a fresh JupyterLab workspace, opening `notebook` (relative to the repository
        root) when given."""
        tree = f"/tree/{notebook}" if notebook else ""
        return f"{self.url}/lab/workspaces/{workspace}{tree}?reset&token={self.token}"

    def api(self, path: str, method: str = "GET") -> object:
        """Call the server's REST API and return the decoded JSON answer (None when empty)."""
        request = urllib.request.Request(
            f"{self.url}/api/{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            body = answer.read()
        return json.loads(body) if body else None

    def shut_down_kernels(self) -> None:
        """Stop every kernel the browser started, so that models loaded in one test free their memory."""
        for kernel in self.api("kernels"):
            self.api(f"kernels/{kernel['id']}", method="DELETE")

    def log_tail(self, characters: int = 3000) -> str:
        """The end of the server's log, for failure messages."""
        return self.log.read_text(errors="replace")[-characters:]


def start_lab(folder: Path, root: Path = ROOT) -> Lab:
    """Start `jupyter lab` on a free port with a random token, notebook dir = `root` (the repository root
    unless told otherwise); its settings, workspaces, checkpoints and log live in `folder`."""
    settings = folder / "settings"
    write_lab_settings(settings)
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(folder / "workspaces"),
    )
    port, token = free_port(), secrets.token_hex(16)
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        f"--port={port}",
        "--ServerApp.ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        f"--FileCheckpoints.checkpoint_dir={folder / 'checkpoints'}",  # none written into the repository
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.news_url=None",
        # window.jupyterapp, so that a test can close its notebooks' tabs without a save prompt
        "--LabApp.expose_app_in_browser=True",
    ]
    if os.geteuid() == 0:  # JupyterLab refuses to run as root unless told it is on purpose
        command.append("--allow-root")
    log = folder / "jupyterlab.log"
    with log.open("wb") as output:
        # its own process group, stopped as one
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    lab = Lab(f"http://127.0.0.1:{port}", token, process, log)
    wait_until_ready(lab)
    return lab


def wait_until_ready(lab: Lab) -> None:
    """Poll the server's status until it answers; fail with its log if it exits or never answers."""
    deadline = time.monotonic() + LAB_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if lab.process.poll() is not None:
            pytest.fail(f"JupyterLab exited with code {lab.process.returncode}:\n{lab.log_tail()}")
        try:
            lab.api("status")
            return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.5)
    stop_lab(lab)
    pytest.fail(f"JupyterLab did not answer within {LAB_START_TIMEOUT_S} s:\n{lab.log_tail()}")


def stop_lab(lab: Lab) -> None:
    """Stop the kernels (each runs in a session of its own), then the server's process group: SIGTERM,
    then SIGKILL if it hangs."""
    if lab.process.poll() is None:
        try:
            lab.shut_down_kernels()
        except (urllib.error.URLError, OSError) as error:  # a hung server: its SIGTERM stops the kernels
            print(f"could not stop the kernels through JupyterLab's API: {error}")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(lab.process.pid, sig)
        except ProcessLookupError:
            return
        try:
            lab.process.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="package")
def lab(tmp_path_factory) -> Iterator[Lab]:
    """The project's JupyterLab, started once for the browser tests and stopped afterwards."""
    lab = start_lab(tmp_path_factory.mktemp("jupyterlab"))
    yield lab
    stop_lab(lab)


@pytest.fixture(scope="package")
def browser_context(tmp_path_factory):
    """A headless Debian Chromium with a fresh user-data dir, driven by playwright.

    Package-scoped: playwright's sync API keeps an asyncio loop running in the main thread while it is
    started, which would make every later `asyncio.run` in the suite fail; it stops after these tests."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        missing_browser("the Python package playwright is not installed")
    if not CHROMIUM.exists():
        missing_browser(f"Chromium is not installed at {CHROMIUM}")
    driver = sync_playwright().start()
    try:
        context = driver.chromium.launch_persistent_context(
            tmp_path_factory.mktemp("chromium-profile"),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000},
        )
    except Error as error:
        driver.stop()
        missing_browser(f"Chromium at {CHROMIUM} does not start ({error.message.splitlines()[0]})")
    yield context
    context.close()
    driver.stop()


@pytest.fixture
def browser_tab(browser_context):
    """A fresh browser tab, closed afterwards; it starts no JupyterLab (Voila's tests need none)."""
    tab = browser_context.new_page()
    yield tab
    tab.close()


@pytest.fixture
def page(browser_tab, lab):
    """A fresh browser tab on the session's JupyterLab; afterwards it closes and its kernels stop."""
    yield browser_tab
    browser_tab.close()  # before its kernels stop, as a student closes the tab (closing twice is a no-op)
    lab.shut_down_kernels()


@pytest.fixture
def console_errors(browser_tab) -> list[str]:
    """The tab's console messages of type error and its uncaught exceptions, as they happen."""
    errors: list[str] = []

    def record_message(message) -> None:
        if message.type == "error":
            errors.append(f"console.error: {message.text} (from {message.location.get('url') or 'the page'})")

    browser_tab.on("console", record_message)
    browser_tab.on("pageerror", lambda error: errors.append(f"uncaught exception: {error}"))
    return errors
