"""The checkers of notebooks 07-13 check the work, not only a number (issue: checkers that check the work):

- a write-exercise refuses labkit's own answer, whatever name it is passed under or wrapped in;
- a measure-and-interpret exercise takes its numbers from the student's own measurement objects, so an
  invented number misses, and its interpretation is a checked choice that the pass message never states;
- an arithmetic exercise's first miss names the idea; only a later miss spells the formula.
Nothing here times anything: every measurement is a fixed object, so a loaded machine changes no verdict."""

from __future__ import annotations

import functools
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from labkit import checks
from labkit.checks import batching, engines, prefill, quant, serving
from labkit.checks.work import run_own
from labkit.engines.compare import greedy_agreement
from labkit.fast.cost import StepCosts
from labkit.fast.roofline import bandwidth_utilisation
from labkit.fast.static import break_even_tokens
from labkit.loadtest.client import client_tpot, parse_sse
from labkit.quant.gguf_blocks import decode_q4_1
from labkit.quant.schemes import absmax_quantize
from labkit.serving.static_batch import planned_waste
from labkit.speculative.drafters import PromptLookupDrafter
from labkit.speculative.rule import (
    accept_greedy,
    accept_or_resample,
    expected_tokens_per_step,
    residual_distribution,
)

OWN = "calling labkit's version does not count"
Q4_BLOCK = np.arange(20, dtype=np.uint8) * 13 % 251
Q4_BLOCK[:4] = np.array([0.01, -0.05], dtype=np.float16).view(np.uint8)


def verdict_of(capsys, checker, *args) -> tuple[bool, str]:
    capsys.readouterr()
    passed = checker(*args)
    return passed, capsys.readouterr().out


def test_run_own_sees_the_reference_under_any_name_and_restores_the_profiler():
    renamed = expected_tokens_per_step
    for fn in (renamed, lambda a, g: renamed(a, g), functools.partial(renamed, 0.5)):
        args = (1,) if isinstance(fn, functools.partial) else (0.5, 1)
        result, error = run_own(fn, *args, references=[expected_tokens_per_step])
        assert result is None and OWN in error, error
    assert run_own(lambda a, g: 1 + a, 0.5, 1, references=[expected_tokens_per_step]) == (1.5, None)
    assert sys.getprofile() is None


# labkit's own answer to each write-exercise, passed in under another name (checker, answer, other args)
REFERENCES = {
    "check_ttft_tpot": (lambda t: (t[0], client_tpot(t[0], t[-1], len(t))),),
    "check_absmax_quantize": (lambda w: absmax_quantize(w, bits=8, granularity="channel"),),
    "check_q4_1_decoder": (lambda raw: decode_q4_1(torch.as_tensor(raw)), Q4_BLOCK),
    "check_expected_tokens": (expected_tokens_per_step,),
    "check_residual": (lambda p, q: residual_distribution(p[None], q[None])[0],),
    "check_prompt_lookup": (lambda c, g: PromptLookupDrafter(3).propose(c, g)[0],),
    "check_accept_rule": (accept_or_resample,),
    "check_wasted_slots": (lambda p, o: planned_waste(p, o).wasted,),
    "check_fcfs_admission": (batching.fcfs_admitted,),
    "check_client_metrics": (lambda s, a: (a[0] - s, client_tpot(a[0] - s, a[-1] - s, len(a))),),
    "check_sse_parser": (parse_sse,),
    "check_greedy_agreement": (greedy_agreement,),
    "check_bandwidth_use": (bandwidth_utilisation,),
    "check_compile_break_even": (break_even_tokens,),
    "check_accepted_guesses": (lambda g, c: (lambda a, own: (a, g[:a] + [own]))(*accept_greedy(g, c)),),
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_labkits_own_answer_under_another_name_does_not_count(capsys, name):
    answer, *args = REFERENCES[name]
    passed, out = verdict_of(capsys, getattr(checks, name), answer, *args)
    assert passed is False and OWN in out, out


def step_costs(
    measured_s: float, ops: int = 2486, op_s: float = 2.5e-6, matmul_s: float = 0.032
) -> StepCosts:
    return StepCosts(
        ops=ops,
        op_seconds=op_s,
        matmul_seconds=matmul_s,
        weight_bytes=538_000_000,
        kv_bytes=1_500_000,
        flops=2.7e8,
        measured_seconds=measured_s,
    )


MODEL = torch.nn.Linear(100, 100)  # 40,400 bytes: the checker reads them off the model itself
F32, BF16 = step_costs(0.040), step_costs(0.0387)  # 1.03x, the matmul kernels the largest term
STATS = SimpleNamespace(acceptance_rate=0.763, proposed=160)
SPEEDUP = expected_tokens_per_step(0.763, 4) / (4 * 0.0002 + 1.675)
STREAM = SimpleNamespace(ttft_s=0.072, e2e_s=2.701)

# checker, the right (number, interpretation), the measurement objects, the choices, an invented number
# (a plausible round value the student did not measure), the interpretations that are wrong here
MEASURED = {
    "check_bfloat16_speedup": (
        0.040 / 0.0387,
        "kernel work",
        (F32, BF16),
        prefill.STEP_LIMITS,
        1.5,
        ["reading weights", "overhead"],
    ),
    "check_ceiling_share": (
        30.8 * 40_400 / 48.8e6,
        "other work",
        (30.8, MODEL, 48.8e6),
        quant.CEILING_LIMITS,
        0.5,
        ["reading weights"],
    ),
    "check_predicted_speedup": (
        SPEEDUP,
        True,
        (STATS, 4, 0.0002, 1.675),
        {"pays": "", "worth": "", "faster": ""},
        2.0,
        [False],
    ),
    "check_batch_gain": (
        2 * 0.1242 / 0.1757,
        "both",
        (0.1242, 0.1757, 32, 64),
        batching.BATCH_LIMITS,
        1.8,
        ["shared work", "per-row work"],
    ),
    "check_streaming_gain": (
        2.748 / 0.072,
        "first token",
        (2.748, STREAM),
        serving.STREAMING_CHANGES,
        30.0,
        ["last token", "both"],
    ),
    "check_thread_speedup": (
        42.7 / 118.5,
        "wake-ups",
        ({1: 118.5, 2: 42.7},),
        engines.THREAD_LIMITS,
        0.5,
        ["work", "even"],
    ),
}


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_measured_answers_come_from_the_measurement_and_the_reading_is_checked(capsys, as_measured, name):
    right, reading, measured, choices, invented, wrong_readings = MEASURED[name]
    as_measured(*measured)
    checker = getattr(checks, name)
    passed, out = verdict_of(capsys, checker, right, reading, *measured)
    assert passed is True, out
    text = out.lower()
    assert not [c for c in choices if c.lower() in text] and not [
        m for m in choices.values() if m and m in out
    ], out
    passed, out = verdict_of(capsys, checker, invented, reading, *measured)
    assert passed is False and "not attempted" not in out.lower(), out
    for wrong in wrong_readings:
        passed, out = verdict_of(capsys, checker, right, wrong, *measured)
        assert passed is False, f"{name} accepted the reading {wrong!r}: {out}"
    passed, out = verdict_of(capsys, checker, right, "something else", *measured)
    assert passed is False, out
    passed, out = verdict_of(capsys, checker, right, None, *measured)
    assert passed is False and "Not attempted" in out, out


def test_the_bfloat16_reading_follows_the_measured_terms(capsys, as_measured):
    # 50 ms of overhead, 10 of kernels
    overhead_heavy = step_costs(0.040, ops=20_000, op_s=2.5e-6, matmul_s=0.01)
    as_measured(0.040, 0.0388, 0.038, 0.02)
    assert verdict_of(
        capsys, checks.check_bfloat16_speedup, 1.03, "overhead", overhead_heavy, step_costs(0.0388)
    )[0]
    assert verdict_of(
        capsys, checks.check_bfloat16_speedup, 1.9, "reading weights", step_costs(0.038), step_costs(0.02)
    )[0]


# checker, a wrong answer that matches no known mistake, the checker's other arguments
ARITHMETIC = {
    "check_arithmetic_intensity": (7.0, ()),
    "check_max_context": (1234, ()),
    "check_quantized_megabytes": (12.3, ()),
    "check_littles_law": (3.0, ()),
    "check_decode_bound": (3.0, ()),
    "check_memory_needed": (3.0, ()),
    "check_kv_blocks": (11, ()),
}
FORMULA_MARKS = (" = ", " / ", " x ", "ceil(", "2 FLOPs", "+ 16")


@pytest.mark.parametrize("name", sorted(ARITHMETIC))
def test_the_first_miss_names_the_idea_and_a_later_one_the_formula(capsys, name):
    wrong, args = ARITHMETIC[name]
    checker = getattr(checks, name)
    first, second = (verdict_of(capsys, checker, wrong, *args)[1] for _ in range(2))
    assert first != second, first
    shown = [mark for mark in FORMULA_MARKS if mark in first.replace(f"{wrong:g}", "")]
    assert not shown, f"{name}'s first miss spells the formula ({shown}): {first}"


def test_arithmetic_intensity_hints_are_its_own(capsys):
    for _ in range(3):
        out = verdict_of(capsys, checks.check_arithmetic_intensity, 7.0)[1]
        assert "KV" not in out and "memory" not in out, out
