"""`python -m labkit.bench sampling`: n samples from one prefill against one request and n separate requests
(prefix cache off and on), one JSON line per ratio, the settings, and the same answers from every way."""

import pytest


@pytest.mark.slow
def test_quick_run_prints_json_ratios_and_the_same_answers(bench_quick_run):
    run = bench_quick_run("sampling")
    assert {record["bench"] for record in run.records} == {
        "sampling_n4_vs_one_request", "sampling_n4_vs_separate_no_prefix_cache",
        "sampling_n4_vs_separate_prefix_cache", "sampling_n4_kv_blocks_vs_separate_no_prefix_cache"}
    assert {record["metric"] for record in run.records} == {"tokens_per_second", "kv_blocks"}
    blocks = next(r for r in run.records if r["metric"] == "kv_blocks")
    assert blocks["labkit"] < blocks["peer"]  # shared prompt blocks: fewer blocks than 4 copies of the prompt
    assert "same 4 answers from the shared request and the separate ones: yes" in run.stdout
    assert "machine:" in run.stdout and "aims:" in run.stdout and "prompt 64 tokens" in run.stdout
