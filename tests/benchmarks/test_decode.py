"""`python -m labkit.bench decode`: labkit's loop against transformers `generate`, one JSON line each."""

import pytest


@pytest.mark.slow
def test_quick_run_prints_json_ratios(bench_quick_run):
    run = bench_quick_run("decode")
    assert set(run.benches) == {"decode", "decode_loop_only"}
    assert "transformers generate" in run.stdout
