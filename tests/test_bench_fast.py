"""`python -m labkit.bench fast`: the waterfall table, its JSON ratios, and llama.cpp's row or skip line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.benchmarks import fast

ROOT = Path(__file__).resolve().parent.parent


def fake_rows(with_llama_cpp: bool = True, with_default_threads: bool = True) -> list:
    rates = [10.0, 20.0, 21.0, 40.0, 50.0, 55.0, 30.0, 51.0, 54.0, 53.0]
    megabytes = [538, 538, 538, 135, 95, 95, 269, 95, 95, 95]
    rows = [fast.Row(label, 1, rate, mb * 1e6) for (label, _, _), rate, mb in zip(fast.ROWS, rates, megabytes)]
    if with_default_threads:
        rows.append(fast.Row(fast.DEFAULT_THREADS, 2, 11.0, 95e6))
    if with_llama_cpp:
        rows.append(fast.Row(fast.LLAMA_CPP, 1, 110.0, 98e6))
    return rows


def test_table_has_ratios_to_fp32_and_llama_cpp_and_bandwidth_use():
    table = fast.table(fake_rows(), bandwidth=20e9)
    fastest = next(line for line in table.splitlines() if line.startswith("+ bfloat16 for the rest"))
    assert "2.75x" in fastest and "0.50x" in fastest  # 55 / 20 tok/s; 55 / 110 tok/s
    assert "26%" in fastest  # 95 MB x 55 tok/s / 20 GB/s
    assert "-" in fast.table(fake_rows(with_llama_cpp=False), bandwidth=20e9).splitlines()[1]


def test_records_compare_each_step_with_fp32_and_the_fastest_with_its_peers():
    records = {r["bench"]: r for r in fast.records(fake_rows(), bandwidth=20e9)}
    assert set(records) == {"fast_fp32_vs_transformers", "fast_fuse", "fast_fuse_int8", "fast_fuse_int4",
                            "fast_fuse_int4_bf16", "fast_fuse_bf16", "fast_fuse_int4_static",
                            "fast_fuse_int4_compiled", "fast_fuse_int4_lookup", "fast_bandwidth", "fast_threads",
                            "fast_vs_llama_cpp"}
    assert records["fast_fuse_int8"]["ratio"] == 2.0 and records["fast_fp32_vs_transformers"]["ratio"] == 2.0
    assert records["fast_vs_llama_cpp"]["ratio"] == 0.5 and records["fast_threads"]["ratio"] == 5.0
    assert records["fast_bandwidth"]["ratio"] == pytest.approx(95e6 * 55 / 20e9, abs=1e-3)
    for record in records.values():
        assert set(record) == {"bench", "metric", "labkit", "peer", "peer_name", "ratio", "machine"}
    plain = {r["bench"] for r in fast.records(fake_rows(False, False), bandwidth=20e9)}
    assert "fast_vs_llama_cpp" not in plain and "fast_threads" not in plain


def test_compile_report_says_when_compiling_pays_for_itself():
    rows = fake_rows()  # eager static 51 tok/s, compiled 54, lookup 53
    report = fast.compile_report(rows, {"+ torch.compile, static shapes": 100.0, "+ prompt lookup, 4 guesses": 90.0})
    compiled, lookup = report.splitlines()
    assert "100.0 s" in compiled and "pays for itself after 91,800 tokens" in compiled  # 100 / (1/51 - 1/54)
    assert "90.0 s" in lookup and "tokens" in lookup
    slower = [fast.Row(r.label, 1, 10.0 if "compile" in r.label else r.tokens_per_second, r.bytes_per_token)
              for r in rows]
    assert "never pays for itself" in fast.compile_report(slower, {"+ torch.compile, static shapes": 100.0})


def test_runs_are_timed_in_turns_after_one_untimed_round():
    from labkit.bench import interleaved_tokens_per_second

    calls = []

    def run(name):
        return lambda: calls.append(name) or 10

    rates = interleaved_tokens_per_second([run("a"), run("b")], repeats=2)
    assert calls == ["a", "b"] * 3  # warm-up round, then two timed rounds, each taking turns
    assert len(rates) == 2 and all(rate > 0 for rate in rates)


def test_measure_rows_refuses_an_unknown_row():
    with pytest.raises(ValueError, match="Unknown rows"):
        fast.measure_rows(None, None, [1], 4, 1, 1, labels=["warp drive"])


def test_llama_cpp_row_is_none_when_llama_cpp_is_not_installed(monkeypatch):
    monkeypatch.setattr(fast.importlib.util, "find_spec", lambda name: None)
    assert fast.llama_cpp_row("Hi", 4, threads=1, repeats=1) is None


@pytest.mark.slow
def test_bench_fast_quick_prints_the_waterfall_and_json_ratios():
    listed = subprocess.run([sys.executable, "-m", "labkit.bench", "--list"], capture_output=True, text=True,
                            check=True).stdout
    assert any(line.startswith("fast") for line in listed.splitlines())
    run = subprocess.run([sys.executable, "-m", "labkit.bench", "fast", "--quick", "--repeats", "1"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    benches = {line["bench"] for line in lines}
    assert {"fast_fp32_vs_transformers", "fast_fuse", "fast_fuse_int8", "fast_fuse_int4", "fast_fuse_int4_bf16",
            "fast_fuse_bf16", "fast_bandwidth"} <= benches
    for line in lines:
        assert set(line) == {"bench", "metric", "labkit", "peer", "peer_name", "ratio", "machine"}
        assert line["peer"] > 0 and abs(line["ratio"] - line["labkit"] / line["peer"]) < 0.01
    for label, _, how in fast.ROWS:
        assert (label in run.stdout) == (how not in fast.COMPILED)  # --quick leaves the compiled rows out
    assert "compiled rows: left out by --quick" in run.stdout
    assert "fast_fuse_int4_static" in benches
    assert "GB/s" in run.stdout and "threads:" in run.stdout
    assert ("fast_vs_llama_cpp" in benches) != ("llama.cpp: skipped" in run.stdout)  # measured, or said why not
