"""Exercise checkers for prefill vs decode and the metrics of inference, notebook 07 (style: checks/foundation.py).

>>> checks.check_arithmetic_intensity(flops_per_byte)
>>> checks.check_ttft_tpot(ttft_tpot)
>>> checks.check_max_context(max_context)
>>> checks.check_bfloat16_speedup(bf16_speedup, limited_by, step_costs[1], bf16_cost)
"""

from __future__ import annotations

import math
from collections.abc import Callable

from labkit.checks.common import matching_hint, not_attempted, read_number, verdict
from labkit.checks.own_answer import refuse_own_answer
from labkit.checks.work import choice_miss, progressive, refuse_unmeasured, reset, run_own
from labkit.loadtest.client import client_tpot
from labkit.metrics import RequestMetrics
from labkit.models.hardware import RESERVES, reserve_bytes
from labkit.models.sizing import GB, ModelShape, format_bytes, model_shape

__all__ = ["check_arithmetic_intensity", "check_bfloat16_speedup", "check_max_context", "check_ttft_tpot"]

# what limits a decode step: the choices of exercise 4
STEP_LIMITS = {
    "reading weights": "the bytes of the weights, read once a step",
    "kernel work": "the matmul kernels' own work per weight, beyond reading it",
    "overhead": "the fixed cost of each of the step's many small ops",
}


def arithmetic_intensity_verdict(answer: float | None, batch: int, bytes_per_weight: float = 4) -> bool:
    """Exercise: FLOPs per byte of weights read, for a linear layer applied to `batch` token vectors
    (activations ignored); within 2 %."""
    value, refusal = read_number(answer, "a number of FLOPs per byte")
    if refusal is not None:
        return refusal
    expected = 2 * batch / bytes_per_weight
    if math.isclose(value, expected, rel_tol=0.02):
        reset("arithmetic_intensity")
        return verdict(True, f"every weight read serves {batch} multiply-adds, one per row of the batch.")
    hints = [
        (expected / 2, "a multiply-add counts as 2 FLOPs (one multiply, one add)."),
        (1 / expected, "intensity is FLOPs divided by bytes, not bytes divided by FLOPs."),
        (
            expected / batch,
            f"the weights are read once for the whole batch, and each of the {batch} rows uses "
            "them: the FLOPs grow with the batch, the bytes do not.",
        ),
        (2 * batch, f"each weight is {bytes_per_weight:g} bytes, not 1."),
    ]
    return verdict(
        False,
        matching_hint(value, hints, rel_tol=0.02)
        or progressive(
            "arithmetic_intensity",
            [
                f"{value:g} is not it. Follow one weight: how many FLOPs does it take part in for a batch of {batch}, "
                "and how many bytes does reading it cost?",
                f"{value:g} is not it. Each weight does one multiply-add (2 FLOPs) per row of the batch and is read "
                "once, every one of its bytes: the sizes of the layer cancel out.",
            ],
        ),
    )


# Notebook 07's Exercise 1: the checker owns its problem, so an answer to a problem a student changed
# counts for nothing; arithmetic_intensity_verdict checks any other (the tests' cases).
ARITHMETIC_INTENSITY_PROBLEM = {"batch": 8, "bytes_per_weight": 4}


def check_arithmetic_intensity(answer: float | None) -> bool:
    """Exercise (07, Exercise 1): FLOPs per byte of fp32 weights read by a linear layer applied to 8 token vectors? (ARITHMETIC_INTENSITY_PROBLEM)."""
    return arithmetic_intensity_verdict(answer, **ARITHMETIC_INTENSITY_PROBLEM)


def check_ttft_tpot(fn: Callable | None) -> bool:
    """Exercise: fn(token_times) -> (ttft, tpot), from the arrival times of the tokens in seconds since the
    request started. Calling labkit's own client_tpot does not count."""
    if fn is None:
        return not_attempted("your function ttft_tpot(token_times)")
    for times in [[0.5, 0.6, 0.7, 0.9], [1.2, 1.25, 1.3], [0.08, 0.3]]:
        n = len(times)
        expected = RequestMetrics(n, times[0], (times[-1] - times[0]) / (n - 1), times[-1], tuple(times))
        got, error = run_own(fn, list(times), references=[client_tpot])
        if error:
            return verdict(False, f"ttft_tpot({times}): {error}")
        try:
            ttft, tpot = (float(x) for x in got)
        except (TypeError, ValueError) as wrong:
            return verdict(
                False,
                f"ttft_tpot({times}) should return a pair of numbers (ttft, tpot); reading it "
                f"raised {type(wrong).__name__}: {wrong}",
            )
        if not math.isclose(ttft, expected.ttft_s, rel_tol=1e-6):
            return verdict(
                False, f"for {times} your TTFT is {ttft!r}: TTFT is the arrival time of the first token."
            )
        if not math.isclose(tpot, expected.tpot_s, rel_tol=1e-6):
            if math.isclose(tpot, times[-1] / n, rel_tol=1e-6):
                return verdict(
                    False, "TPOT leaves out the first token: its wait is the TTFT, mostly prefill."
                )
            if math.isclose(tpot, (times[-1] - times[0]) / n, rel_tol=1e-6):
                return verdict(False, f"for {times} you divided by n: count the gaps between {n} tokens.")
            return verdict(
                False,
                f"for {times} your TPOT is {tpot!r}: TPOT is the mean gap between the tokens that "
                "came after the first.",
            )
    return verdict(
        True, "TTFT is the first arrival; TPOT the mean gap after it, as labkit.metrics computes them."
    )


def max_context_verdict(
    answer: int | None,
    shape: ModelShape | str,
    memory_gb: float,
    batch: int = 1,
    dtype: str = "fp16",
    kind: str = "budget",
) -> bool:
    """Exercise: the longest context per sequence that fits in memory_gb (10^9 bytes) after the reserve of
    that kind of memory (labkit.models.hardware.reserve_bytes: none for a plain "budget") and the weights."""
    value, refusal = read_number(answer, "a number of tokens", number="a number of tokens")
    if refusal is not None:
        return refusal
    shape = model_shape(shape) if isinstance(shape, str) else shape
    reserve = reserve_bytes(memory_gb * GB, kind)
    expected = shape.max_tokens(memory_gb * GB - reserve, batch, dtype)
    if reserve and math.isclose(value, shape.max_tokens(memory_gb * GB, batch, dtype), rel_tol=0.01):
        return verdict(
            False,
            f"that fills all {memory_gb:g} GB: the runtime keeps its reserve first (section 5: for {kind}, "
            f"{RESERVES[kind][2]}); only what the reserve leaves holds the weights and the cache.",
        )
    if expected == 0:
        if value <= 0:
            return verdict(True, "nothing fits: the weights alone take more than the memory.")
        return verdict(
            False,
            f"start with the weights: they take {format_bytes(shape.weight_bytes(dtype))}, and "
            f"the memory holds {memory_gb} GB. What do they leave for the KV cache?",
        )
    if math.isclose(value, expected, rel_tol=0.01):
        reset("max_context")
        return verdict(
            True,
            f"the KV cache then takes {format_bytes(shape.kv_cache_bytes(expected, batch, dtype))}, "
            f"the rest of the memory after {'the reserve and ' if reserve else ''}the weights.",
        )
    ignoring_weights = int((memory_gb * GB - reserve) // shape.kv_cache_bytes(1, batch, dtype))
    if math.isclose(value, ignoring_weights, rel_tol=0.01):
        return verdict(False, "subtract the weights first: only what they leave is free for the KV cache.")
    if math.isclose(value, expected * batch, rel_tol=0.01):
        return verdict(False, "that is the total over the batch; the question asks for tokens per sequence.")
    return verdict(
        False,
        progressive(
            "max_context",
            [
                f"{value:,.0f} is not it. Memory holds two things here, the weights and the KV cache: how many bytes does "
                "one more token of context add to the cache, for the whole batch?",
                f"{value:,.0f} is not it. The free bytes are the memory minus the weights; one token of context costs "
                f"K and V in every layer and KV head, for each of the {batch} sequences.",
            ],
        ),
    )


# Notebook 07's Exercise 3: the checker owns its problem, so an answer to a problem a student changed
# counts for nothing; max_context_verdict checks any other (the tests' cases).
MAX_CONTEXT_PROBLEM = {"shape": "llama-3.1-8b", "memory_gb": 80, "batch": 8, "dtype": "fp16", "kind": "VRAM"}


def check_max_context(answer: int | None) -> bool:
    """Exercise (07, Exercise 3): the longest context per sequence of Llama-3.1-8B in fp16, batch 8, on an 80 GB
    GPU, after its VRAM reserve? (MAX_CONTEXT_PROBLEM)."""
    if (refused := refuse_own_answer(answer, "check_max_context", ["max_tokens"])) is not None:
        return refused
    return max_context_verdict(answer, **MAX_CONTEXT_PROBLEM)


def _limit_of(speedup: float, float32_step) -> str:
    """What limits a step: near 2x from half the bytes, the reads; else the larger of the float32 step's
    overhead and kernel terms."""
    if speedup >= 1.7:
        return "reading weights"
    overhead = float32_step.ops * float32_step.op_seconds
    return "overhead" if overhead > float32_step.matmul_seconds else "kernel work"


def check_bfloat16_speedup(answer: float | None, limited_by: str | None, float32_step, bfloat16_step) -> bool:
    """Exercise (07): how many times faster is the bfloat16 decode step than the float32 one, and what limits
    a step here (one of STEP_LIMITS)? Both read from the two measurements (labkit.fast.cost.StepCosts),
    the speed-up within 3 %."""
    value, refusal = read_number(
        answer,
        "a speed-up (the float32 step's time / the bfloat16 step's) and what limits a step",
        others=(limited_by,),
    )
    if refusal is not None:
        return refusal
    unmeasured = refuse_unmeasured(
        "measure both steps with measure_step(...), as section 3 and this section do",
        float32_step=getattr(float32_step, "measured_seconds", None),
        bfloat16_step=getattr(bfloat16_step, "measured_seconds", None),
    )
    if unmeasured is not None:
        return unmeasured
    expected = float32_step.measured_seconds / bfloat16_step.measured_seconds
    if not math.isclose(value, expected, rel_tol=0.03):
        hints = [
            (
                1 / expected,
                "that is the bfloat16 step's time as a share of the float32 step's: a speed-up divides "
                "the old (float32) time by the new one.",
            ),
            (100 * expected, "give a ratio of times, not a percentage."),
            (1 - 1 / expected, "that is the share of the time saved; give the ratio of the two times."),
            (
                2.0,
                "2x is what halving the bytes would buy a step "
                "limited by reading its weights: that is the hypothesis. Divide the two measured step times.",
            ),
        ]
        return verdict(
            False,
            matching_hint(value, hints, rel_tol=0.03)
            or f"{value:g} is not what your two measurements give. Divide the float32 step's measured time "
            "by the bfloat16 step's (the `measured` of each report, not the `predicted`).",
        )
    miss = choice_miss(
        limited_by,
        STEP_LIMITS,
        _limit_of(expected, float32_step),
        "set your speed-up beside the 2x that half the bytes would buy if reading them set the pace, "
        "then see which term of the float32 report is the largest.",
    )
    if miss:
        return verdict(False, f"the speed-up is right; {miss}")
    return verdict(
        True,
        f"the bfloat16 step ran {bfloat16_step.ops} ops against float32's {float32_step.ops}. "
        "Going further below asks the same at batch 8, where 8 rows share each weight read.",
    )
