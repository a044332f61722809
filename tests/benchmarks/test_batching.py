"""`python -m labkit.bench batching`: the three runners on the real model, one JSON line per ratio, and the
same outputs from each."""

import pytest


@pytest.mark.slow
def test_quick_run_prints_json_ratios_and_agreeing_outputs(bench_quick_run):
    run = bench_quick_run("batching")
    assert len(run.records) == 6 and {record["metric"] for record in run.records} == {"tokens_per_second", "seconds"}
    assert "outputs agree: yes" in run.stdout and "machine:" in run.stdout
    assert "vLLM" in run.stdout
