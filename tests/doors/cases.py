"""Every folder's table of cases in one place: CASES (a list of Door), NO_ARGUMENT (name -> why no case),
and REUSED (name -> the registry of an older bad-input test that feeds it bad input, "file::NAME")."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import door  # tests/doors/conftest.py puts this folder on sys.path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

FOLDERS = [
    "top",
    "benchmarks",
    "core",
    "course",
    "decoding",
    "engines",
    "fast",
    "grade",
    "loadtest",
    "models",
    "parallel",
    "quant",
    "serving",
    "speculative",
    "viz",
]
TABLES = {folder: importlib.import_module(f"cases_{folder}") for folder in FOLDERS}
CASES: list[door.Door] = [case for table in TABLES.values() for case in table.CASES]
NO_ARGUMENT: dict[str, str] = {
    name: why for table in TABLES.values() for name, why in table.NO_ARGUMENT.items()
}

# The older tests whose registries feed these names bad input (each checked to hold the name's function).
REUSED = {
    "labkit.decoding.generate.generate": "tests/decoding/test_bad_input.py::WITH_CHAT",
    "labkit.decoding.generate.generate_text": "tests/decoding/test_bad_input.py::WITH_CHAT",
    "labkit.decoding.generate.generate_ids": "tests/decoding/test_bad_input.py::WITH_CHAT",
    "labkit.decoding.generate.chat": "tests/decoding/test_bad_input.py::WITH_CHAT",
    "labkit.decoding.search.beam_search": "tests/decoding/test_bad_input.py::WITH_CHAT",
    "labkit.decoding.mbr.mbr_decode": "tests/decoding/test_bad_input.py::WITH_CHAT",
    "labkit.decoding.mirostat.mirostat_generate": "tests/decoding/test_bad_input.py::WITH_CHAT",
    "labkit.speculative.generate.speculative_generate": "tests/decoding/test_bad_input.py::WITH_CHAT",
    "labkit.serving.http.server.start_server": "tests/core/test_arguments.py::LAUNCHERS",
    "labkit.engines.llama_server.start_llama_server": "tests/core/test_arguments.py::LAUNCHERS",
    "labkit.engines.vllm.start_vllm_server": "tests/core/test_arguments.py::LAUNCHERS",
    "labkit.engines.llamacpp.load_llamacpp": "tests/core/test_arguments.py::LAUNCHERS",
}


def registry(reference: str) -> object:
    """The object `file::NAME` names: NAME in that test file, loaded as a module of its own."""
    path, _, name = reference.partition("::")
    spec = importlib.util.spec_from_file_location(f"reused_{Path(path).stem}_{abs(hash(path))}", ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def holds(table: object, function: object) -> bool:
    """Whether a registry (a dict of functions, or of (function, bad values) pairs) holds function."""
    values = table.values() if isinstance(table, dict) else table
    return any(
        value is function or (isinstance(value, tuple) and value and value[0] is function) for value in values
    )
