"""The guard in tests/conftest.py keeps real-model tests marked `slow`, so that `make test-fast` stays fast.

A small suite with that conftest runs in a child pytest: a test that uses a real-model fixture without
the marker fails before the fixture is set up; one that loads a model through transformers'
`from_pretrained` without the marker fails after the real loader ran; the same tests marked `slow` pass,
and so does a test that builds the tiny model (no loading). No real model is loaded: the suite's own
`smollm2` fixture stands in for the conftest's, and `from_pretrained` reads a saved tiny model.
"""

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

GUARDED_SUITE = """
import pytest
from transformers import AutoModelForCausalLM

import labkit


@pytest.fixture
def smollm2(request, tmp_path_factory):  # stands in for the conftest's: records its set-up, loads nothing
    (tmp_path_factory.getbasetemp() / f"smollm2-set-up-for-{request.node.name}").touch()


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    labkit.tiny_model("transformers").save_pretrained(folder)
    return folder


def test_unmarked_uses_the_fixture(smollm2):
    pass


@pytest.mark.slow
def test_marked_uses_the_fixture(smollm2):
    pass


def test_unmarked_loads(saved_tiny):
    model = AutoModelForCausalLM.from_pretrained(saved_tiny)
    assert model.config.num_hidden_layers == 2  # the real loader ran and returned the model


@pytest.mark.slow
def test_marked_loads(saved_tiny):
    AutoModelForCausalLM.from_pretrained(saved_tiny)


def test_unmarked_builds_the_tiny_model():
    labkit.tiny_model("transformers")
"""


def outcomes(summary: str) -> dict[str, str]:
    """{test name: PASSED / FAILED / ERROR} from pytest's `-rA` short summary."""
    found = {}
    for line in summary.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR") and "::" in rest:
            found[rest.split("::")[1].split(" ")[0]] = word
    return found


def test_the_guard_fails_unmarked_real_model_tests_and_only_those(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: uses a real model\n")
    (suite / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    (suite / "test_guarded.py").write_text(GUARDED_SUITE)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:nbval",
            "-rA",
            "--basetemp",
            str(tmp_path / "base"),
            str(suite),
        ],
        capture_output=True,
        text=True,
        cwd=suite,
        timeout=300,
    )
    assert outcomes(run.stdout) == {
        "test_unmarked_uses_the_fixture": "ERROR",  # failed at set-up
        "test_marked_uses_the_fixture": "PASSED",
        "test_unmarked_loads": "FAILED",
        "test_marked_loads": "PASSED",
        "test_unmarked_builds_the_tiny_model": "PASSED",
    }, run.stdout[-4000:] + run.stderr[-2000:]
    assert (
        "test_unmarked_uses_the_fixture uses the real model fixture(s) smollm2 but is not marked slow"
        in run.stdout
    )
    assert (
        "test_unmarked_loads loaded a real model but is not marked slow: "
        "LlamaForCausalLM.from_pretrained(" in run.stdout
    )
    set_up_for = {path.name for path in (tmp_path / "base").glob("smollm2-set-up-for-*")}
    # the unmarked test stopped before
    assert set_up_for == {"smollm2-set-up-for-test_marked_uses_the_fixture"}
