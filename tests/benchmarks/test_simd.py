"""`python -m labkit.bench simd`: both engines on one SIMD path at a time, each at its best."""

import pytest

from labkit.benchmarks import fast, simd
from labkit.fast.kernel import load_kernel


def test_the_avx2_environment_puts_labkit_torch_and_llama_cpp_on_avx2():
    env = simd.path_env("avx2")
    assert env["LABKIT_Q4_PATH"] == "avx2" and env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    widest = simd.widest_path()
    expected = "build" if widest == "avx2" else "build-avx2"  # on an AVX2-only CPU the native build is AVX2
    assert env["LLAMA_CPP_LIB_PATH"].endswith(f"llama.cpp/{expected}/bin")
    with pytest.raises(ValueError, match="path must be one of"):
        simd.path_env("sse4")


def test_every_path_this_cpu_runs_is_timed_or_said_to_be_missing():
    built, missing = simd.timed_paths()
    assert sorted(built + missing) == sorted(p for p in load_kernel().paths if p in simd.TORCH_CAPABILITY)


def test_the_table_names_each_engines_settings_and_their_ratio():
    labkit = fast.Row(fast.Q4_1_COMPILED, 2, 120.0, 85e6, "ACTIVE")
    cpp = fast.Row(fast.LLAMA_CPP, 2, 100.0, 98e6, "PASSIVE")
    line = simd.table({"avx2": (labkit, cpp)}).splitlines()[1]
    assert line.startswith("avx2") and "ACTIVE 2 thr" in line and "PASSIVE 2 thr" in line
    assert line.endswith("1.20x") and "120.0" in line and "100.0" in line


@pytest.mark.slow
def test_the_quick_run_times_each_built_path_or_says_how_to_build_it(bench_quick_run):
    run = bench_quick_run("simd")
    built, missing = simd.timed_paths()
    assert {r["bench"] for r in run.records} == {f"simd_{path}_vs_llama_cpp" for path in built}
    for path in missing:
        assert f"{path}: skipped, no llama.cpp build for it" in run.stdout
