"""`python -m labkit.bench speculative`: runs, prints its table and one JSON line per comparison."""

import pytest

import labkit
from labkit.benchmarks import speculative as bench


def test_step_cost_of_a_model_against_itself_is_about_one():
    model = labkit.tiny_model("labkit")
    assert 0.2 < bench.step_cost(model, model, context=8, repeats=5) < 5  # same work: same order of time


@pytest.mark.slow
def test_quick_run_prints_json_ratios(bench_quick_run):
    run = bench_quick_run("speculative")
    assert run.benches == [
        "speculative_extractive_prompt_lookup",
        "speculative_extractive_early_exit_k=4",
        "speculative_open-ended_prompt_lookup",
        "speculative_open-ended_early_exit_k=4",
    ]
    table = [line for line in run.stdout.splitlines() if line.startswith(("extractive", "open-ended"))]
    assert len(table) == 6 and all(line.endswith("True") for line in table)  # every run = plain greedy tokens
    assert "aims: prompt lookup >= 1.8x" in run.stdout
