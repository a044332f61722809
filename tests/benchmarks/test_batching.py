"""`python -m labkit.bench batching`: the runners on the real model (one at a time, static batches, continuous
batching at the same seats and at all of them, chunked prefill), one JSON line per
ratio, every runner's settings, and the same outputs from each."""

import pytest


@pytest.mark.slow
def test_quick_run_prints_json_ratios_and_agreeing_outputs(bench_quick_run):
    run = bench_quick_run("batching")
    names = {record["bench"] for record in run.records}
    per_scenario = [
        "batching_vs_one_at_a_time",
        "batching_vs_static_same_seats",
        "batching_4_vs_2_seats",
        "batching_ttft_p50",
        "batching_chunked_prefill",
        "batching_chunked_prefill_tpot_p95",
    ]
    assert names == {f"{name}_{scenario}" for name in per_scenario for scenario in ("together", "staggered")}
    assert {record["metric"] for record in run.records} == {"tokens_per_second", "seconds"}
    assert "outputs agree: yes" in run.stdout and "machine:" in run.stdout
    assert "vLLM" in run.stdout and "static, 2 seats, padded" in run.stdout and "range" in run.stdout
    assert run.stdout.count("threads") >= 4 and "continuous vs static, both 2 seats" in run.stdout
    assert "chunked prefill yes" in run.stdout
