"""Fixtures shared by the whole suite, and the guard that keeps every real-model test marked `slow`.

The order: the longest files first (LONGEST_FIRST), so that `make test`'s two workers finish together.

Fixtures: the real embedded models, loaded once per session (`smollm2`, `smollm2_labkit`, `gemma3`);
SmolLM2's tokenizer alone (`tokenizer`, no weights read); the tiny random model in labkit's and
transformers' implementation (`tiny`, `tiny_hf`, one set of weights); the HTTP layer's ModelService on
the tiny model (`service`, options from the module's SERVICE_OPTIONS); `one_thread`; and
`bench_quick_run`, which runs `python -m labkit.bench TOPIC --quick` and checks its JSON records.

The guard: `make test-fast` leaves out the tests marked `slow`, so every test that loads a real model
must carry that marker.
- At collection, a test that uses a real-model fixture (directly or through another fixture) without
  the marker is found; it fails at set-up, before the model is loaded.
- While a test runs, transformers' `PreTrainedModel.from_pretrained` is wrapped: every real model goes
  through it (`labkit.load_model`, bitsandbytes, the cache conversion, a test's own call). The real
  loader runs; a test not marked `slow` that loaded a model then fails, naming what it loaded.
Models loaded in another process (a server, `python -m labkit.bench`) are out of the guard's sight:
tests that start one are marked `slow` by hand. tests/project/test_slow_guard.py checks the guard.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedModel

import labkit

ROOT = Path(__file__).resolve().parent.parent
REAL_MODEL_FIXTURES = frozenset({"smollm2", "smollm2_labkit", "gemma3"})
UNMARKED = pytest.StashKey[str]()  # why a test may not run: it uses a real-model fixture without `slow`
MODEL_LOADS = pytest.StashKey[list[str]]()  # what a test not marked slow loaded in its current phase
REAL_LOADER = pytest.StashKey[classmethod]()  # transformers' own PreTrainedModel.from_pretrained


# --- the real models, once per session -------------------------------------------------------------


def vendored(path: Path, what: str = "it unpacks MathJax and axe-core from npm") -> Path:
    """A file or folder `make site-vendor` unpacks; the test is skipped without it, and failed in CI (CI=true)."""
    if not path.exists():
        message = f"{path} is missing: run `make site-vendor` ({what})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the site's tests must run in CI, but {message}", pytrace=False)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def site_vendor():
    """`vendored` for a test: site_vendor(path) is path, or the test skipped (failed in CI) without it."""
    return vendored


@pytest.fixture(scope="module")
def course_site(tmp_path_factory) -> Path:
    """The course's site (labkit.course.site) built from the committed notebooks into a temporary folder; its
    folder (index.html, one page per notebook). About 10 s."""
    from labkit.course.site import MATHJAX, build_site

    root = Path(__file__).resolve().parents[1]
    folder = tmp_path_factory.mktemp("site")
    notebooks = sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    build_site(
        notebooks,
        folder / "site",
        source_dir=folder / "source",
        readme=root / "README.md",
        mathjax=vendored(root / MATHJAX),
    )
    return folder / "site"


@pytest.fixture(scope="session")
def smollm2():
    """(transformers model, tokenizer) of SmolLM2-135M-Instruct, float32 on the CPU."""
    return labkit.load_model("smollm2-135m")


@pytest.fixture(scope="session")
def smollm2_labkit(smollm2):
    """labkit's from-scratch Llama on the same weights as the `smollm2` fixture."""
    return labkit.Llama.from_hf(smollm2[0])


@pytest.fixture(scope="session")
def gemma3():
    """(transformers model, tokenizer) of Gemma-3-270M (base), float32 on the CPU."""
    return labkit.load_model("gemma3-270m")


# --- cheap stand-ins: no real weights ----------------------------------------------------------------


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2's tokenizer, read from the model cache without its weights. The tiny model shares its
    vocabulary, and it equals the tokenizer that `smollm2` returns."""
    return labkit.load_tokenizer("smollm2-135m")


@pytest.fixture(scope="module")
def tiny():
    """labkit's Llama with 2 layers of random weights (seed 0) and SmolLM2's vocabulary; one per module."""
    return labkit.tiny_model("labkit", seed=0)


@pytest.fixture(scope="module")
def tiny_hf():
    """transformers' LlamaForCausalLM with the same weights as `tiny`; one per module."""
    return labkit.tiny_model("transformers", seed=0)


@pytest.fixture(scope="module")
def service(request, tokenizer):
    """The HTTP layer's ModelService "tiny" on a tiny model of its own, its engine thread started; one per
    module, for tests that drive the app in process. A module names its options in SERVICE_OPTIONS: the
    Engine's keyword arguments (default: max_num_seqs=4, max_waiting=8) and ModelService's max_body_bytes.

        SERVICE_OPTIONS = {"max_waiting": 64}  # a module's queue of 64 instead of 8
    """
    from labkit.serving.engine import Engine
    from labkit.serving.http.engine_thread import EngineThread
    from labkit.serving.http.model_service import ModelService

    options = {"max_num_seqs": 4, "max_waiting": 8, **getattr(request.module, "SERVICE_OPTIONS", {})}
    limits = {"max_body_bytes": options.pop("max_body_bytes")} if "max_body_bytes" in options else {}
    model = labkit.tiny_model("labkit", seed=0)
    engine_thread = EngineThread(Engine(model, tokenizer, **options))
    engine_thread.start()
    yield ModelService("tiny", model, tokenizer, engine_thread, **limits)
    engine_thread.stop()


@pytest.fixture
def one_thread():
    """One torch thread for the test: tiny-model tests run thousands of millisecond-sized ops, and on a
    busy 2-core machine handing each one between threads costs more than the op itself."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- the benchmark command line ----------------------------------------------------------------------

RECORD_KEYS = {"bench", "metric", "labkit", "peer", "peer_name", "ratio", "machine"}


@dataclass(frozen=True)
class BenchRun:
    """What `python -m labkit.bench TOPIC --quick --repeats 1` printed."""

    stdout: str
    records: list[dict]  # its JSON lines, in order

    @property
    def benches(self) -> list[str]:
        return [record["bench"] for record in self.records]


def run_quick_bench(topic: str, timeout: float | None = None) -> BenchRun:
    """Run a benchmark topic's quick mode from the repository root; check that it exits with 0 and that
    every JSON record has the seven fields, a positive peer and a ratio of labkit / peer (to 0.01)."""
    run = subprocess.run(
        [sys.executable, "-m", "labkit.bench", topic, "--quick", "--repeats", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    records = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    for record in records:
        assert set(record) == RECORD_KEYS, record
        assert record["peer"] > 0 and abs(record["ratio"] - record["labkit"] / record["peer"]) < 0.01, record
    return BenchRun(run.stdout, records)


@pytest.fixture
def bench_quick_run():
    """`run_quick_bench`: the command-line check every benchmark topic shares (its tests are slow:
    the child process loads the real model)."""
    return run_quick_bench


# --- the order: the longest files first ---------------------------------------------------------------

# `make test` shares the files between two workers (pytest-xdist, --dist loadfile), each file whole on one
# worker, handed out in collection order. A long notebook handed out last would leave the other worker
# idle while it runs, so these files (the longest under `make test` on 2 cores, longest first) come first;
# every other file keeps its place after them. Only the speed of the run depends on this list.
LONGEST_FIRST = [
    "notebooks/13_how_fast_can_we_decode.ipynb",
    "notebooks/12_run_locally_and_choose_a_model.ipynb",
    "notebooks/10_batching.ipynb",
    "notebooks/14_spending_compute_at_inference_time.ipynb",
    "tests/engines/test_real.py",
    "notebooks/09_speculative_decoding.ipynb",
    "notebooks/11_serving.ipynb",
    "notebooks/08_quantization.ipynb",
    "tests/browser/test_live_slides.py",
    "notebooks/04_sampling.ipynb",
    "tests/browser/test_jupyterlab.py",
]


def file_rank(item: pytest.Item) -> int:
    """Where item's file comes in the run: its place in LONGEST_FIRST, or after all of them."""
    path = Path(item.path).resolve()
    path = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else ""
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


# --- the guard: real models only in tests marked slow ----------------------------------------------


def pytest_collection_modifyitems(config, items):
    """Put the longest files first (a stable sort: each file's tests keep their order); then find the
    tests that use a real-model fixture without the `slow` marker."""
    items.sort(key=file_rank)
    for item in items:
        real = sorted(REAL_MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ())))
        if real and item.get_closest_marker("slow") is None:
            item.stash[UNMARKED] = (
                f"{item.nodeid} uses the real model fixture(s) {', '.join(real)} but is not "
                "marked slow: add @pytest.mark.slow (make test-fast leaves those out)."
            )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Fail a test found at collection before any of its fixtures (the real model) is set up."""
    if UNMARKED in item.stash:
        pytest.fail(item.stash[UNMARKED], pytrace=False)


_running: list[pytest.Item] = []  # the test whose set-up, call or tear-down is running now


def _guarded_from_pretrained(loader):
    def from_pretrained(cls, *args, **kwargs):
        model = loader.__func__(cls, *args, **kwargs)  # the real loader, always
        item = _running[-1] if _running else None
        if item is not None and item.get_closest_marker("slow") is None:
            source = args[0] if args else kwargs.get("pretrained_model_name_or_path")
            item.stash.setdefault(MODEL_LOADS, []).append(f"{cls.__name__}.from_pretrained({str(source)!r})")
        return model

    return classmethod(from_pretrained)


def pytest_configure(config):
    """Wrap the loader for the whole session."""
    config.stash[REAL_LOADER] = PreTrainedModel.__dict__["from_pretrained"]
    PreTrainedModel.from_pretrained = _guarded_from_pretrained(config.stash[REAL_LOADER])


def pytest_unconfigure(config):
    PreTrainedModel.from_pretrained = config.stash[REAL_LOADER]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A phase (set-up, call, tear-down) of a test not marked slow that loaded a model fails."""
    report = yield
    loads = item.stash.get(MODEL_LOADS, [])
    if loads and not report.failed:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} loaded a real model but is not marked slow: "
            f"{'; '.join(loads)}. Add @pytest.mark.slow (make test-fast leaves those out)."
        )
    loads.clear()
    return report
