"""Every checker against made-up work (issue: checkers that own their problem). A checker is one of four
shapes, by what the student hands in, and each shape meets the made-up work it invites:

- ANSWERS, a number to a problem the checker sets itself: a changed problem is refused
  (test_changed_problem.CHANGED: the right answer to another batch, model or size);
- FUNCTIONS, the student's code, which the checker runs on its own inputs (the student never chooses
  them): a function that calls labkit's answer or a library's is refused (COMPUTES below);
- RUNS, a reading of the student's own measurement or run: a made-up measurement is refused (MADE_UP
  below: the same numbers or objects pass once labkit's run log holds them, as the notebook's run does);
- READS, a number read off what the notebook loaded (a model, a tokenizer, a text): the checker computes
  the answer from those very objects, and the model, dtype, text, conversation, token ids or context lengths
  an exercise sets are its own (a changed one is refused: CHANGED_READS below).

A plausible wrong answer is refused for every checker, with a hint (test_no_giveaway.CASES covers them
all; checked here too). Nothing here times anything: every measurement is a fixed number or object.
"""

from __future__ import annotations

import importlib
import inspect

import gguf
import numpy as np
import pytest
import torch

from labkit import checks
from labkit.checks import kvcache as kvcache_checks
from labkit.decoding.mirostat import MirostatRun, MirostatStep
from tests.checks.test_changed_problem import CHANGED
from tests.checks.test_no_giveaway import CASES, CHECKERS, FRONTIER
from tests.checks.test_own_work import MEASURED, Q4_BLOCK, REFERENCES, verdict_of

ANSWERS = sorted([*CHANGED, "check_memory_needed"])
FUNCTIONS = [
    "check_absmax_quantize",
    "check_accept_rule",
    "check_all_reduce_seconds",
    "check_accepted_guesses",
    "check_bandwidth_use",
    "check_beam_step",
    "check_client_metrics",
    "check_compile_break_even",
    "check_copy_on_write",
    "check_distinct_n",
    "check_expected_tokens",
    "check_fcfs_admission",
    "check_greedy_agreement",
    "check_greedy_loop",
    "check_growing_cache",
    "check_majority_vote",
    "check_mbr_select",
    "check_mirostat_step",
    "check_next_token_probs",
    "check_pipeline_time",
    "check_prompt_lookup",
    "check_q4_1_decoder",
    "check_q4_inner_loop",
    "check_residual",
    "check_sharded_mlp",
    "check_softmax_merge",
    "check_sse_parser",
    "check_top_k_filter",
    "check_windowed_cache_bytes",
    "check_top_p_filter",
    "check_ttft_tpot",
    "check_wasted_slots",
]
RUNS = [
    "check_batch_gain",
    "check_bfloat16_speedup",
    "check_cache_speedup",
    "check_ceiling_share",
    "check_context_token_cost",
    "check_frontier_reading",
    "check_mean_surprise",
    "check_predicted_speedup",
    "check_streaming_gain",
    "check_thread_speedup",
    # re-timed by the checker instead (a speed 3x off its own is refused: test_foundation)
    "check_weight_traffic",
    # the run's own objects, each step with its logits or each beam's text, which the checker runs again
    "check_blocking_cost",
    "check_tail_share",
]
READS = [
    "check_chat_string",
    "check_context_ratio",
    "check_model_megabytes",
    "check_parameter_count",
    "check_sequence_logprob",
    "check_token_count",
]


# where each read checker meets the right answer to a changed problem: another model (a tiny one, SmolLM2 in
# bfloat16 for the megabytes), text, conversation, token ids (an empty continuation) or context lengths
CHANGED_READS = {
    "check_chat_string": "test_foundation.test_the_exercises_of_01_refuse_a_changed_problem",
    "check_context_ratio": "test_foundation.test_the_exercises_of_01_refuse_a_changed_problem",
    "check_model_megabytes": "test_foundation.test_the_exercises_of_00_are_smollm2_in_float32",
    "check_parameter_count": "test_foundation.test_the_exercises_of_00_refuse_another_model",
    "check_sequence_logprob": "test_decoding.test_sequence_logprob_is_the_exercises_own",
    "check_token_count": "test_foundation.test_the_exercises_of_01_refuse_a_changed_problem",
}


def test_every_checker_has_one_shape_and_a_wrong_answer_case():
    shapes = [*ANSWERS, *FUNCTIONS, *RUNS, *READS]
    assert sorted(shapes) == CHECKERS, (
        f"without a shape: {sorted(set(CHECKERS) - set(shapes))}; no such checker: {sorted(set(shapes) - set(CHECKERS))}"
    )
    assert len(shapes) == len(set(shapes)), "a checker in two shapes"
    # a plausible wrong answer for each, refused with a hint (test_no_giveaway)
    assert sorted(CASES) == CHECKERS
    for name in ANSWERS:
        assert len(inspect.signature(getattr(checks, name)).parameters) == 1, (
            f"{name} takes more than the answer"
        )


def test_every_read_checker_has_a_changed_problem_case():
    """The cases run in their own files (some load SmolLM2); here, that each exists and calls its checker."""
    assert sorted(CHANGED_READS) == sorted(READS), sorted(set(READS) ^ set(CHANGED_READS))
    for name, where in CHANGED_READS.items():
        module, test = where.split(".")
        source = inspect.getsource(getattr(importlib.import_module(f"tests.checks.{module}"), test))
        assert f"checks.{name}(" in source, f"{where} does not call {name}"


# --- a call that computes the answer: labkit's own, or a library's ---------------------------------------

TORCH_QUANTIZED = lambda w: (  # noqa: E731  torch's own per-channel int8 codes and scales
    lambda scale: (
        torch.quantize_per_channel(
            w, scale, torch.zeros(len(scale), dtype=torch.long), 0, torch.qint8
        ).int_repr(),
        scale[:, None],
    )
)(w.abs().amax(1) / 127)
GGUF_DECODED = lambda raw: gguf.dequantize(np.asarray(raw), gguf.GGMLQuantizationType.Q4_1).reshape(-1)  # noqa: E731
LIBRARY = {
    "check_absmax_quantize": (TORCH_QUANTIZED, "torch.quantize_per_channel"),
    "check_q4_1_decoder": (GGUF_DECODED, "gguf.dequantize", Q4_BLOCK),
}
# function checkers whose labkit-answer case lives in test_no_giveaway.CASES (among its wrong answers) or in
# their own module's tests; and the C line of notebook 13, compiled, which no Python call can stand in for
COVERED_ELSEWHERE = {
    "check_beam_step": "test_no_giveaway: labkit's beam_step",
    "check_copy_on_write": "test_compute: labkit's copy_on_write_append",
    "check_distinct_n": "test_no_giveaway: labkit's distinct_n",
    "check_greedy_loop": "test_no_giveaway: labkit's greedy_decode; test_generation: labkit.generate",
    "check_growing_cache": "test_kvcache: labkit's KVCache",
    "check_majority_vote": "test_compute: labkit's majority_answer",
    "check_mbr_select": "test_no_giveaway: labkit's mbr_select",
    "check_mirostat_step": "test_no_giveaway: labkit's mirostat_v2_filter",
    "check_next_token_probs": "test_generation: labkit.generate",
    "check_q4_inner_loop": "a C++ function body, compiled and run by the checker",
    "check_softmax_merge": "test_longctx: labkit's add_tile",
    "check_all_reduce_seconds": "test_parallel: labkit's ring_all_reduce_seconds",
    "check_pipeline_time": "test_parallel: labkit's bubble_fraction",
    "check_sharded_mlp": "test_parallel: labkit's even_split",
    "check_windowed_cache_bytes": "test_longctx: labkit's ModelShape.kv_cache_bytes",
    "check_top_k_filter": "test_no_giveaway: labkit's top_k_filter",
    "check_top_p_filter": "test_no_giveaway: labkit's top_p_filter",
}


def test_every_function_checker_refuses_a_call_that_computes_the_answer():
    covered = set(REFERENCES) | set(LIBRARY) | set(COVERED_ELSEWHERE)
    assert set(FUNCTIONS) <= covered, f"no computed-answer case: {sorted(set(FUNCTIONS) - covered)}"


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")  # torch's quantized tensors are deprecated
@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_a_library_call_that_computes_the_answer_does_not_count(capsys, name):
    answer, library_call, *args = LIBRARY[name]
    passed, out = verdict_of(capsys, getattr(checks, name), answer, *args)
    assert passed is False and library_call in out and "does not count" in out, out


# --- a made-up measurement: refused until labkit's run log holds it --------------------------------------

POSITIONS = [16, 64, 128, 192, 256]
STEPS_WITHOUT = [0.08 + 0.0017 * p for p in POSITIONS]  # seconds: 1.7 ms per token of context
STEPS_WITH = [0.05 + 0.00001 * p for p in POSITIONS]
MIROSTAT = MirostatRun(  # tau = 5 bits, settled at 2.7: mu rose, yet the cut kept too few tokens
    [7] * 14, [MirostatStep(7, s, 12.0, 50) for s in [6.0] * 10 + [2.5, 3.0, 2.0, 3.3]], 5.0
)


def made_up(name: str, f) -> tuple[tuple, dict]:
    """(args, keyword args) of a right reading of a measurement for checker `name`."""
    if name in MEASURED:
        right, reading, measured, *_ = MEASURED[name]
        return (right, reading, *measured), {}
    if name == "check_context_token_cost":
        f("monkeypatch").setattr(kvcache_checks, "step_seconds_without_cache", lambda *a: 0.5)
        return (1.7, POSITIONS, STEPS_WITHOUT, STEPS_WITH, f("tiny"), None), {"why": "shared_pass"}
    if name == "check_frontier_reading":
        return (-100 / 60, False, "outvoted", *FRONTIER), {}
    if name == "check_mean_surprise":
        return (2.7, MIROSTAT, 10), {"reached": False, "why": "cut_only"}
    raise KeyError(name)


MADE_UP = [*MEASURED, "check_context_token_cost", "check_frontier_reading", "check_mean_surprise"]


def test_every_run_checker_meets_a_made_up_measurement():
    elsewhere = {"check_cache_speedup", "check_weight_traffic", "check_blocking_cost", "check_tail_share"}
    assert set(RUNS) - elsewhere <= set(MADE_UP), sorted(set(RUNS) - elsewhere - set(MADE_UP))


@pytest.mark.parametrize("name", sorted(MADE_UP))
def test_a_made_up_measurement_is_refused_and_the_same_one_measured_passes(
    capsys, request, as_measured, name
):
    checker = getattr(checks, name)
    args, kwargs = made_up(name, request.getfixturevalue)
    capsys.readouterr()
    assert checker(*args, **kwargs) is False
    out = capsys.readouterr().out
    assert "not measured in this kernel" in out, out
    as_measured(*args[1:])
    assert checker(*args, **kwargs) is True, capsys.readouterr().out
