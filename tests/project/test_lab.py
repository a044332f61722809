"""`make lab` starts a JupyterLab server that opens on notebook 00 and can run its kernel."""

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from jupyter_core.paths import jupyter_runtime_dir

ROOT = Path(__file__).resolve().parents[2]
FIRST_NOTEBOOK = "00_setup_and_tour.ipynb"  # JupyterLab serves the folder of the file it opens
TOKEN = "labkit-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read(url: str):
    """(status, body) of a GET with the test token, or None while the server is not up."""
    request = urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except OSError:
        return None


@pytest.fixture(scope="module")
def lab_server():
    """Run `make lab` headless; yield (base url, the server's log once it is up)."""
    port = free_port()
    options = f"--no-browser --port={port} --ServerApp.token={TOKEN} --ServerApp.ip=127.0.0.1"
    process = subprocess.Popen(
        ["make", "lab", f"LAB_OPTIONS={options}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(iter(process.stdout.readline, "")), daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if read(f"{base}/api/status") is not None and browser_open_pages(port):
                break
            time.sleep(0.3)
        yield base, port, "".join(log)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)


def browser_open_pages(port: int) -> list[str]:
    """The redirect pages JupyterLab writes for the browser to open the named file, for this server."""
    pages = Path(jupyter_runtime_dir()).glob("jpserver-file-to-run-*-open.html")
    return [text for text in (page.read_text() for page in pages) if f":{port}/" in text]


def test_make_lab_opens_the_first_notebook(lab_server):
    """The page JupyterLab hands the browser redirects to notebook 00."""
    base, port, log = lab_server
    pages = browser_open_pages(port)
    assert pages, log
    assert re.search(rf":{port}/lab/tree/{re.escape(FIRST_NOTEBOOK)}", pages[0])
    status, page = read(f"{base}/lab/tree/{FIRST_NOTEBOOK}")
    assert status == 200 and "JupyterLab" in page


def test_lab_serves_the_notebook_a_python_kernel_and_widgets(lab_server):
    base, _, _ = lab_server
    status, body = read(f"{base}/api/contents/{FIRST_NOTEBOOK}")
    assert status == 200 and json.loads(body)["content"]["metadata"]["kernelspec"]["name"] == "python3"
    _, specs = read(f"{base}/api/kernelspecs")
    assert "python3" in json.loads(specs)["kernelspecs"]
    _, extensions = read(f"{base}/lab/api/extensions")
    names = {extension["name"] for extension in json.loads(extensions)}
    assert "jupyter-widgets-jupyterlab-manager" in names, names  # ipywidgets render in the lab
    assert "jupyterlab-rise" in names, names  # live slides, offline, with working widgets
