"""`python -m labkit.bench serve`: listed, compares like with like, prints its table and one JSON line per ratio."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.benchmarks import serve as bench
from labkit.serving.http.client import StreamTiming
from labkit.serving.http.load import LoadResult

ROOT = Path(__file__).resolve().parent.parent


def level(concurrency: int, texts: list[str], wall_s: float) -> LoadResult:
    requests = tuple(StreamTiming(text, 4, 0.0, 0.1, 0.2, 0.2 + 0.05 * concurrency * 3) for text in texts)
    return LoadResult(concurrency, requests, wall_s)


def test_records_ratio_and_differing_answers():
    one, many = level(1, ["a", "b", "c", "d"], 8.0), level(4, ["a", "b", "x", "d"], 2.0)
    assert bench.differing(one, many) == [2]
    throughput, tpot = bench.records(one, many, 4)
    assert throughput["bench"] == "serve_concurrency4_vs_one_at_a_time" and throughput["ratio"] == 4.0
    assert tpot["metric"] == "seconds" and tpot["ratio"] == pytest.approx(4.0)
    assert bench.median_run([level(1, ["a"], w) for w in (3.0, 1.0, 2.0)]).wall_s == 2.0


def test_the_real_engines_rows_point_to_the_engines_benchmark():
    lines = bench.peer_lines()
    assert [line.split(" row:")[0] for line in lines] == ["llama.cpp server", "vLLM CPU server"]
    assert all("python -m labkit.bench engines" in line for line in lines)


@pytest.mark.slow
def test_quick_run_prints_the_table_and_json_ratios():
    run = subprocess.run([sys.executable, "-m", "labkit.bench", "serve", "--quick", "--repeats", "1"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert [line["bench"] for line in lines] == ["serve_concurrency4_vs_one_at_a_time", "serve_tpot_p50_concurrency4"]
    for line in lines:
        assert set(line) == {"bench", "metric", "labkit", "peer", "peer_name", "ratio", "machine"}
        assert line["peer"] > 0 and abs(line["ratio"] - line["labkit"] / line["peer"]) < 0.01
    assert "every request answered whole: yes; answers the same both ways: yes" in run.stdout
    assert "llama.cpp server row: see `python -m labkit.bench engines`" in run.stdout and "tokens/s" in run.stdout
