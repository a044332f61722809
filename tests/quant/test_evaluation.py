"""labkit.quant.evaluation: the evaluation text and prompts it reads (labkit.models.eval_data), the results table
and its pieces (the table as `python -m labkit.bench quant` prints it: tests/benchmarks/test_quant.py)."""

import math
from pathlib import Path

import pytest
import torch

import labkit
from labkit.models import eval_data
from labkit.quant import evaluation
from labkit.quant.linear import quantize_model

ROOT = Path(__file__).resolve().parents[2]


def test_eval_data_is_a_few_thousand_tokens_of_prose_and_code(tokenizer):
    text = eval_data.eval_text()
    assert 3000 <= eval_data.eval_ids(tokenizer).shape[1] <= 6000
    assert "```python" in text and "def " in text and "SELECT" in text
    assert eval_data.eval_ids(tokenizer, max_tokens=100).shape == (1, 100)
    for max_tokens in (1, 100.0, True):
        with pytest.raises(ValueError, match=r"max_tokens must be a whole number of 2 or more \(or None "):
            eval_data.eval_ids(tokenizer, max_tokens=max_tokens)
    assert "Provenance" in (ROOT / "data" / "eval" / "README.md").read_text()
    prompts = eval_data.eval_prompts(tokenizer)
    assert len(prompts) == 8 and all(isinstance(i, int) for p in prompts for i in p)


def test_greedy_agreement():
    reference = [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert evaluation.greedy_agreement(reference, reference) == 1.0
    assert evaluation.greedy_agreement([[1, 2, 9, 9], [5, 6, 7, 8]], reference) == (0.5 + 1.0) / 2
    assert evaluation.greedy_agreement([[9, 2, 3, 4], [5, 6, 7]], reference) == (0.0 + 0.75) / 2
    with pytest.raises(ValueError, match="one continuation per prompt"):
        evaluation.greedy_agreement([[1]], reference)


def test_model_nbytes_counts_tied_weights_once_and_quantized_weights_small():
    model = labkit.tiny_model("transformers")
    fp32 = evaluation.model_nbytes(model)
    assert fp32 == 4 * sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    quantize_model(model, "int8")
    linear_params = sum(
        m.weight.numel()
        for m in labkit.tiny_model("transformers").model.layers.modules()
        if isinstance(m, torch.nn.Linear)
    )
    assert fp32 - evaluation.model_nbytes(model) > 0.74 * 3 * linear_params  # 4 bytes -> ~1 byte each


def test_evaluate_rejects_unknown_variants():
    with pytest.raises(ValueError, match="Unknown variants \\['int2'\\]"):
        evaluation.evaluate(["int2"])


def test_results_table_formats_rows_and_missing_variants():
    rows = [
        evaluation.Result("fp32", "", 538e6, 10.0, 1.0, 20.0),
        evaluation.Result("int8", "", 219e6, 10.05, 0.9, 40.0),
        evaluation.Result("bnb nf4", "", math.nan, math.nan, math.nan, math.nan, note="No kernel. Use x."),
    ]
    table = evaluation.results_table(rows)
    assert "0.41x" in table and "+0.5%" in table and "2.00x" in table and "unavailable: No kernel" in table


def test_results_table_layout_stays_as_notebook_08_prints_it():
    """Each column lines up under its title; a variant timed for no speed stops after its agreement, and one
    that could not be built says why."""
    rows = [
        evaluation.Result("fp32", "", 538e6, 10.0, 1.0, 20.0),
        evaluation.Result("int8", "", 219e6, 10.05, 0.9, math.nan),
        evaluation.Result("bnb nf4", "", math.nan, math.nan, math.nan, math.nan, note="No kernel. Use x."),
    ]
    assert evaluation.results_table(rows).splitlines() == [
        "variant          MB  x fp32  perplexity   Δ ppl  agreement   tok/s  x fp32",
        "fp32          538.0   1.00x      10.000   +0.0%      100%     20.0   1.00x",
        "int8          219.0   0.41x      10.050   +0.5%       90% ",
        "bnb nf4      unavailable: No kernel",
    ]


def test_decode_speeds_time_the_variants_in_turns(monkeypatch):
    """One untimed round, then `repeats` rounds that each decode once with every variant: a change of the
    machine's load mid-way hits every variant alike."""
    calls = []
    monkeypatch.setattr(evaluation, "encode_prompt", lambda tokenizer, text: [1, 2, 3])
    monkeypatch.setattr(
        evaluation,
        "generate_ids",
        lambda model, tokenizer, ids, max_new_tokens: calls.append(model) or [0] * max_new_tokens,
    )
    speeds = evaluation.decode_tokens_per_second(
        {"fp32": "a", "int8": "b", "nf4": "c"}, None, new_tokens=4, repeats=3
    )
    assert calls == ["a", "b", "c"] * 4
    assert list(speeds) == ["fp32", "int8", "nf4"] and all(rate > 0 for rate in speeds.values())


def test_evaluate_refuses_zero_repeats_before_building_a_model():
    with pytest.raises(ValueError, match="repeats"):
        evaluation.evaluate(["int8"], repeats=0)
