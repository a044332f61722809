"""Exercise checkers for batching and continuous batching, notebook 10 (see labkit/checks/foundation.py for the style).

>>> checks.check_kv_blocks(answer)
>>> checks.check_wasted_slots(wasted_slots)
>>> checks.check_fcfs_admission(admit)
>>> checks.check_batch_gain(answer, limited_by, step_s[5], step_64_s, rows=32, more_rows=64)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from labkit.checks.common import as_number, matching_hint, not_attempted, read_number, verdict
from labkit.checks.work import choice_verdict, progressive, refuse_unmeasured, reset, run_own
from labkit.serving.static_batch import planned_waste

__all__ = ["check_batch_gain", "check_fcfs_admission", "check_kv_blocks", "check_wasted_slots"]


def kv_blocks(lengths: Sequence[int], block_size: int) -> int:
    """KV blocks that sequences of these lengths hold in a paged pool (no sharing): sum of ceil(n / block_size)."""
    return sum(math.ceil(n / block_size) for n in lengths)


def fcfs_admitted(prompt_lengths: Sequence[int], free_blocks: int, block_size: int, free_seats: int) -> int:
    """How many requests at the head of the queue FCFS admits: in order, while a seat is free and the prompt's
    blocks fit; stop at the first that does not (never skip ahead)."""
    admitted = 0
    for length in prompt_lengths:
        need = math.ceil(length / block_size)
        if admitted == free_seats or need > free_blocks:
            break
        free_blocks -= need
        admitted += 1
    return admitted


def kv_blocks_verdict(answer: int | None, lengths: Sequence[int], block_size: int) -> bool:
    """Exercise: how many KV blocks of `block_size` tokens do sequences of these lengths hold (no sharing)?"""
    value, refusal = read_number(answer, "a number of blocks", number="a number of blocks")
    if refusal is not None:
        return refusal
    expected = kv_blocks(lengths, block_size)
    if value == expected:
        reset("kv_blocks")
        return verdict(
            True,
            f"{expected} blocks: each sequence rounds up to whole blocks on its own "
            f"({', '.join(str(math.ceil(n / block_size)) for n in lengths)}).",
        )
    hints = [
        (
            math.ceil(sum(lengths) / block_size),
            "blocks are never shared between sequences here: round up each sequence on its own, then add.",
        ),
        (
            sum(n // block_size for n in lengths),
            "a partly filled block is still a whole block: round up, not down.",
        ),
        (sum(lengths) / block_size, "a sequence holds whole blocks: round each one up to an integer."),
        (
            sum(lengths),
            "that is a number of tokens; divide each sequence's tokens by the block size (rounding up).",
        ),
    ]
    for wrong, hint in hints:
        if math.isclose(value, wrong):
            return verdict(False, hint)
    return verdict(
        False,
        f"{value:g} is not it. "
        + progressive(
            "kv_blocks",
            [
                "A block belongs to one sequence: how many blocks does each sequence need on its own?",
                f"Add up ceil(tokens / {block_size}) over the sequences.",
            ],
        ),
    )


# Notebook 10's Exercise 1: the checker owns its problem, so an answer to a problem a student changed
# counts for nothing; kv_blocks_verdict checks any other (the tests' cases).
KV_BLOCKS_PROBLEM = {"lengths": (37, 5, 16, 71), "block_size": 16}


def check_kv_blocks(answer: int | None) -> bool:
    """Exercise (10, Exercise 1): how many KV blocks do sequences of 37, 5, 16 and 71 tokens hold, in blocks of 16 tokens? (KV_BLOCKS_PROBLEM)."""
    return kv_blocks_verdict(answer, **KV_BLOCKS_PROBLEM)


def check_wasted_slots(fn: Callable | None) -> bool:
    """Exercise: fn(prompt_lengths, output_lengths) -> the token slots ONE static batch wastes: the prompts'
    padding to the longest prompt, plus the idle decode slots of rows that finished before the longest.
    Calling labkit's own planned_waste does not count."""
    if fn is None:
        return not_attempted("your function wasted_slots(prompt_lengths, output_lengths)")
    cases = [([5, 9, 3], [10, 4, 7]), ([12, 12], [3, 8]), ([4, 7, 7, 2], [6, 6, 6, 6]), ([8], [5])]
    for prompts, outputs in cases:
        waste = planned_waste(prompts, outputs)
        got, error = run_own(fn, list(prompts), list(outputs), references=[planned_waste])
        if error:
            return verdict(False, f"wasted_slots({prompts}, {outputs}): {error}")
        value = as_number(got)
        if value == waste.wasted:
            continue
        where = f"for prompts {prompts} and outputs {outputs}"
        if value == waste.idle:
            return verdict(
                False,
                f"{where} you counted the idle decode slots but not the prompts' padding: "
                "prefill pads every prompt to the longest.",
            )
        if value == waste.padding:
            return verdict(
                False,
                f"{where} you counted the padding but not the idle decode slots: a finished row "
                "runs until the longest output is done.",
            )
        longest = max(p + o for p, o in zip(prompts, outputs))
        if value == sum(longest - p - o for p, o in zip(prompts, outputs)):
            return verdict(
                False,
                f"{where}: prefill and decode are padded separately. Prompts are padded to the "
                "longest prompt; outputs run to the longest output.",
            )
        return verdict(
            False,
            f"{where} you have {got!r}. Add two counts: the padding of each prompt up to the "
            "longest prompt, and the idle slots of each row until the longest output is done.",
        )
    return verdict(
        True,
        "padding to the longest prompt plus idle slots until the longest output: work that a "
        "static batch pays for and throws away.",
    )


def check_fcfs_admission(fn: Callable | None) -> bool:
    """Exercise: fn(prompt_lengths, free_blocks, block_size, free_seats) -> how many requests at the head of
    the queue are admitted, first come first served. Calling the checker's own fcfs_admitted does not count."""
    if fn is None:
        return not_attempted("your function admit(prompt_lengths, free_blocks, block_size, free_seats)")
    cases = [
        ([20, 40, 10], 8, 16, 4),
        ([60, 10, 10], 3, 16, 4),
        ([16, 16, 16, 16], 10, 16, 2),
        ([1, 17, 33], 6, 16, 8),
        ([], 5, 16, 4),
        ([50], 2, 16, 1),
    ]
    for prompts, free_blocks, block_size, seats in cases:
        expected = fcfs_admitted(prompts, free_blocks, block_size, seats)
        got, error = run_own(fn, list(prompts), free_blocks, block_size, seats, references=[fcfs_admitted])
        if error:
            return verdict(False, f"admit({prompts}, {free_blocks}, {block_size}, {seats}): {error}")
        if as_number(got) == expected:
            continue
        where = f"admit({prompts}, free_blocks={free_blocks}, block_size={block_size}, free_seats={seats})"
        if as_number(got) == fcfs_admitted(prompts, free_blocks, block_size, len(prompts)):
            return verdict(False, f"{where} gave {got!r}: at most free_seats requests may join.")
        floor = fcfs_admitted(
            [(p // block_size) * block_size for p in prompts], free_blocks, block_size, seats
        )
        if as_number(got) == floor and floor != expected:
            return verdict(
                False, f"{where} gave {got!r}: a prompt of n tokens needs ceil(n / block_size) blocks."
            )
        return verdict(
            False,
            f"{where} gave {got!r}, which is not it. Go in order and stop at the FIRST request that "
            "does not fit: skipping ahead to a smaller one would let it overtake (and could "
            "starve a long prompt).",
        )
    return verdict(
        True, "first come, first served: in order, while seats and blocks last, never skipping ahead."
    )


# what a decode step of many rows is made of: the choices of exercise 4
BATCH_LIMITS = {
    "shared work": "what all rows share (the weight reads, the per-op overhead) is most of a step",
    "both": "the shared work and each row's own work cost about as much",
    "per-row work": "each row's own work is most of a step, so more rows buy little",
}


def batch_limit(gain: float, factor: float) -> str:
    """Which of BATCH_LIMITS a measured tokens/s gain from `factor` times the rows shows.

    >>> batch_limit(1.4, 2.0)
    'both'
    """
    return "shared work" if gain >= 0.9 * factor else "both" if gain >= 1.2 else "per-row work"


def _batch_gain_slips(expected: float, growth: float, rows: int, more_rows: int) -> list[tuple[float, str]]:
    """(what a recognised slip gives, its hint) for the gain in tokens/s from `rows` to `more_rows` rows."""
    return [
        (
            growth,
            "that is how much longer the step got. Tokens/s also counts the tokens a step makes: one per row.",
        ),
        (1 / expected, f"upside down: batch {more_rows}'s rate goes on top."),
        (100 * expected, "give a ratio, not a percentage."),
        (
            more_rows / rows,
            f"{more_rows / rows:g}x is what the rows alone would buy if the step took no longer: that "
            "is the hypothesis. Compare the two measured rates.",
        ),
    ]


def check_batch_gain(
    answer: float | None,
    limited_by: str | None,
    step_s: float,
    more_rows_step_s: float,
    rows: int = 32,
    more_rows: int = 64,
) -> bool:
    """Exercise (10): how many times the tokens/s of a decode step at `rows` rows does a step at `more_rows`
    give (the measured ratio (more_rows / more_rows_step_s) / (rows / step_s), within 3 %), and what is a step
    of that size made of (one of BATCH_LIMITS)?"""
    value, refusal = read_number(
        answer,
        f"a ratio (tokens/s at batch {more_rows} / tokens/s at batch {rows}) and what a step is made of",
        others=(limited_by,),
    )
    if refusal is not None:
        return refusal
    unmeasured = refuse_unmeasured(
        "time the steps with decode_step_seconds(...), as sections 1 and this one do",
        step_s=step_s,
        more_rows_step_s=more_rows_step_s,
    )
    if unmeasured is not None:
        return unmeasured
    growth = more_rows_step_s / step_s
    expected = (more_rows / rows) / growth
    if abs(value - expected) > 0.03 * expected:
        return verdict(
            False,
            matching_hint(value, _batch_gain_slips(expected, growth, rows, more_rows), rel_tol=0.03)
            or progressive(
                "batch_gain",
                [
                    f"{value:g} is not what your two measurements give. A batch's tokens/s counts the tokens its step makes "
                    "and the time the step takes.",
                    f"{value:g} is not it. Tokens/s at a batch is its rows over its step's seconds; divide the larger batch's "
                    "rate by the smaller one's.",
                ],
            ),
        )
    return choice_verdict(
        limited_by,
        BATCH_LIMITS,
        batch_limit(expected, more_rows / rows),
        f"set your ratio beside the "
        f"{more_rows / rows:g}x that free rows would buy and the 1x of rows that each pay their own way.",
        name="limited_by",
        exercise="batch_gain",
        right_so_far="the ratio is right",
        passed=f"a step at batch {more_rows} took {growth:.2f}x as long as at batch {rows}. Continuous batching "
        "(section 3) keeps the batch full, so this is what every step of a busy server gets.",
    )
