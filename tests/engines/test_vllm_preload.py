"""labkit.engines.vllm's LD_PRELOAD: the libraries vLLM's CPU docs ask for, where they exist (no vLLM needed)."""

from __future__ import annotations

import pytest

from labkit.engines import vllm
from labkit.engines.vllm import preload_env, preloads


@pytest.fixture
def environment(tmp_path, monkeypatch):
    """A vLLM-like environment whose lib/ holds libiomp5.so, and a tcmalloc path that may or may not exist."""
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "lib").mkdir()
    (tmp_path / "venv" / "lib" / "libiomp5.so").write_bytes(b"")
    monkeypatch.setattr(vllm, "TCMALLOC", tmp_path / "libtcmalloc_minimal.so.4")
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    return tmp_path


def test_intel_openmp_alone_when_the_system_has_no_tcmalloc(environment):
    python = environment / "venv" / "bin" / "python"
    assert preloads(python) == [environment / "venv" / "lib" / "libiomp5.so"]
    assert preload_env(python) == {"LD_PRELOAD": str(environment / "venv" / "lib" / "libiomp5.so")}


def test_tcmalloc_first_then_intel_openmp_then_any_preload_already_set(environment, monkeypatch):
    vllm.TCMALLOC.write_bytes(b"")
    monkeypatch.setenv("LD_PRELOAD", "/opt/mine.so")
    python = environment / "venv" / "bin" / "python"
    iomp = environment / "venv" / "lib" / "libiomp5.so"
    assert preload_env(python) == {"LD_PRELOAD": f"{vllm.TCMALLOC}:{iomp}:/opt/mine.so"}


def test_nothing_to_preload_sets_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm, "TCMALLOC", tmp_path / "absent.so")
    assert preloads(tmp_path / "bin" / "python") == []
    assert preload_env(tmp_path / "bin" / "python") == {}


def test_a_preload_flag_that_is_not_a_bool_is_refused_before_anything_starts():
    with pytest.raises(TypeError, match="preload must be True or False"):
        vllm.start_vllm_server(preload="yes")
