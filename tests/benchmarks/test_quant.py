"""`python -m labkit.bench quant`: the results table of every variant and one JSON line per ratio."""

import pytest


@pytest.mark.slow
def test_quick_run_prints_the_table_and_json_ratios(bench_quick_run):
    run = bench_quick_run("quant")
    assert set(run.benches) == {
        "quant_int8_decode",
        "quant_int8_perplexity",
        "quant_nf4_perplexity",
        "quant_int4_perplexity",
        "quant_int4_decode",
    }
    by_bench = {record["bench"]: record for record in run.records}
    assert 0.97 < by_bench["quant_int8_perplexity"]["ratio"] < 1.03  # int8 barely moves perplexity
    for variant in ("fp32", "int8", "int4 g32", "nf4"):
        assert variant in run.stdout
