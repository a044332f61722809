"""`python -m labkit.bench serve`: labkit's server against llama-server and vLLM, closed and open loop, with
each server's settings, and the records that hold the aims."""

import math
import os

import pytest

from labkit.benchmarks import serve as bench
from labkit.benchmarks.serve_servers import FASTEST_LABKIT, LABKIT_FLOAT32, LLAMA_SERVER, contenders
from labkit.loadtest.client import StreamTiming
from labkit.loadtest.load_result import LoadResult, Target

TARGET = Target(ttft_s=1.0, tpot_s=0.1)


def timing(ttft_s: float, tpot_s: float, tokens: int = 5, text: str = "a") -> StreamTiming:
    return StreamTiming(
        text,
        tokens,
        sent_s=0.0,
        first_frame_s=ttft_s,
        ttft_s=ttft_s,
        e2e_s=ttft_s + (0.0 if math.isnan(tpot_s) else tpot_s * (tokens - 1)),
    )


def level(
    tokens_per_s: float, ttfts: list[float], concurrency: int = 0, rate: float = math.nan
) -> LoadResult:
    requests = tuple(timing(t, 0.05) for t in ttfts)
    return LoadResult(
        concurrency, requests, sum(r.output_tokens for r in requests) / tokens_per_s, arrival_rate=rate
    )


def test_goodput_counts_only_the_requests_within_the_target():
    result = level(10.0, [0.5, 0.9, 1.5, 3.0], rate=2.0)  # 20 tokens in 2 s, two requests met the target
    assert result.goodput(TARGET) == pytest.approx(1.0)
    assert bench.met_share(result, TARGET) == 0.5
    assert not TARGET.met_by(timing(0.5, 0.2)) and TARGET.met_by(timing(0.5, math.nan, tokens=1))


def test_the_goodput_aim_is_taken_at_the_highest_rate_the_best_peer_meets():
    peer = [
        level(50, [0.2] * 4, concurrency=8),
        level(50, [0.2] * 10, rate=1.0),
        level(50, [0.2] * 9 + [5.0], rate=2.0),
        level(50, [5.0] * 10, rate=4.0),
    ]
    mine = [
        level(60, [0.2] * 4, concurrency=8),
        level(60, [0.2] * 10, rate=1.0),
        level(60, [0.2] * 10, rate=2.0),
        level(60, [0.2] * 10, rate=4.0),
    ]
    assert bench.highest_rate_met(peer, TARGET) == 2.0  # 90 % met at 2 req/s, none at 4
    slower = [
        level(40, [0.2] * 4, concurrency=8),
        level(40, [0.2] * 10, rate=1.0),
        level(40, [0.2] * 8 + [5.0] * 2, rate=2.0),
        level(40, [5.0] * 10, rate=4.0),
    ]
    results = {"labkit server, fuse+q4_1": mine, "peer": peer, "peer, other threads": slower}
    records = bench.aim_records(
        results, [("labkit server, fuse+q4_1", ("peer", "peer, other threads"))], TARGET
    )
    # every level; no goodput ratio at 4 req/s, where no peer met it
    assert [r["bench"] for r in records] == [
        "serve_labkit_fuse_q4_1_vs_peer_clients8",
        "serve_labkit_fuse_q4_1_goodput_vs_peer_rate1",
        "serve_labkit_fuse_q4_1_goodput_vs_peer_rate2",
    ]
    assert records[0]["ratio"] == pytest.approx(1.2)  # against the faster of the peer's two settings
    # all ten met, in a shorter wall time (60 vs 50 tokens/s), against nine of ten
    assert records[2]["ratio"] == pytest.approx((10 / (50 / 60)) / 9, abs=1e-3)


def test_every_server_states_its_settings_and_llama_server_gets_a_slot_per_client():
    servers = {server.name: server for server in contenders(seats=16)}
    assert list(servers)[:3] == [LABKIT_FLOAT32, FASTEST_LABKIT, LLAMA_SERVER]
    assert "16 seats" in servers[LABKIT_FLOAT32].settings and "float32" in servers[LABKIT_FLOAT32].settings
    assert "Q4_1 weights x Q8_1 activations on labkit's kernel" in servers[FASTEST_LABKIT].settings
    assert "Q4_1 GGUF, 16 slots" in servers[LLAMA_SERVER].settings
    assert all(server.settings for server in servers.values())
    assert "VLLM_CPU_OMP_THREADS_BIND=0-" in servers["vLLM CPU, all cores"].settings
    assert "vLLM CPU" not in [server.name for server in contenders(seats=4, quick=True)]


def test_quick_runs_labkits_servers_eager_and_keeps_vllm_only_when_asked():
    quick = {server.name: server for server in contenders(seats=8, quick=True, vllm=True)}
    assert list(quick) == [LABKIT_FLOAT32, FASTEST_LABKIT, LLAMA_SERVER, "vLLM CPU", "vLLM CPU, all cores"]
    for name in (LABKIT_FLOAT32, FASTEST_LABKIT):
        assert "eager" in quick[name].settings and "compiled" not in quick[name].settings
    full = {server.name: server for server in contenders(seats=8)}
    assert all("decode step compiled" in full[name].settings for name in (LABKIT_FLOAT32, FASTEST_LABKIT))
    assert quick[LLAMA_SERVER].settings.endswith("OMP_WAIT_POLICY=PASSIVE")
    assert full[LLAMA_SERVER].settings.endswith("OpenMP default wait")
    assert "vLLM CPU" not in [server.name for server in contenders(seats=8, quick=True, vllm=False)]


@pytest.mark.slow
def test_quick_run_prints_the_table_and_json_ratios(bench_quick_run):
    run = bench_quick_run("serve")
    assert run.benches[0] == "serve_concurrency4_vs_one_at_a_time"
    assert "every request answered whole: yes" in run.stdout
    assert "4 req/s" in run.stdout and "goodput" in run.stdout and "target: TTFT <= 1000 ms" in run.stdout
    for name in (LABKIT_FLOAT32, FASTEST_LABKIT):
        assert f"  {name}: " in run.stdout  # its settings line
    if os.environ.get("CI") == "true":  # CI builds llama-server (make engines): its rows must be there
        assert (
            "llama-server: skipped" not in run.stdout
            and "serve_labkit_fuse_q4_1_vs_llama_server_clients4" in run.benches
        )
