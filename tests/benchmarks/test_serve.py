"""`python -m labkit.bench serve`: listed, compares like with like, prints its table and one JSON line per ratio."""

import pytest

from labkit.benchmarks import serve as bench
from labkit.serving.http.client import StreamTiming
from labkit.serving.http.load import LoadResult

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
def test_quick_run_prints_the_table_and_json_ratios(bench_quick_run):
    run = bench_quick_run("serve")
    assert run.benches == ["serve_concurrency4_vs_one_at_a_time", "serve_tpot_p50_concurrency4"]
    assert "every request answered whole: yes; answers the same both ways: yes" in run.stdout
    assert "llama.cpp server row: see `python -m labkit.bench engines`" in run.stdout and "tokens/s" in run.stdout
