"""Notebook 12 runs the real engines. Without `make engines` its cells are skipped with that hint; in CI
(`CI=true`, where .ci/run installs the engines first) they run and a missing engine fails them."""

import os

import pytest

ENGINE_NOTEBOOK_PREFIX = "12_"


def pytest_addoption(parser, pluginmanager):
    """With `-p no:nbval` (Python tests only), accept and ignore the nbval options that pyproject's
    addopts passes, instead of refusing them as unknown."""
    if pluginmanager.is_blocked("nbval"):
        group = parser.getgroup("nbval", "nbval is disabled (-p no:nbval): its options are ignored")
        group.addoption("--nbval", action="store_true")
        group.addoption("--nbval-current-env", action="store_true")
        group.addoption("--nbval-sanitize-with")


def engines_missing() -> str | None:
    """Why notebook 12 cannot run here, or None when both engines are installed."""
    from labkit.engines.install import MAKE_ENGINES, llamacpp_installed, vllm_installed

    missing = [
        name for name, ok in (("llama.cpp", llamacpp_installed()), ("vLLM", vllm_installed())) if not ok
    ]
    return f"{' and '.join(missing)} not installed. {MAKE_ENGINES}" if missing else None


def pytest_collection_modifyitems(config, items):
    engine_cells = [
        item
        for item in items
        if item.path.suffix == ".ipynb" and item.path.name.startswith(ENGINE_NOTEBOOK_PREFIX)
    ]
    reason = engines_missing() if engine_cells and os.environ.get("CI") != "true" else None
    for item in engine_cells if reason else []:
        item.add_marker(pytest.mark.skip(reason=reason))


NOTEBOOK_SECONDS: dict[str, float] = {}  # notebook file name -> seconds its cells took under nbval


def pytest_runtest_logreport(report):
    """Add up the time of every notebook cell nbval runs (set-up, call and tear-down)."""
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        name = os.path.basename(path)
        NOTEBOOK_SECONDS[name] = NOTEBOOK_SECONDS.get(name, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    """After the run: each notebook's execution time under nbval, so its stated run time can be checked."""
    if not NOTEBOOK_SECONDS:
        return
    terminalreporter.section("notebook run times (nbval, this machine)")
    for name, seconds in sorted(NOTEBOOK_SECONDS.items()):
        terminalreporter.write_line(f"{name:45} {seconds / 60:5.1f} min")
