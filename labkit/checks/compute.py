"""Exercise checkers for spending compute at inference time, notebook 14 (see labkit/checks/foundation.py for
the style). A vote that calls labkit's own vote or answer reader, or an append that calls labkit's own copy on
write, does not count; the reading of the frontier is checked against the student's own accuracies.

    >>> checks.check_majority_vote(vote)
    >>> checks.check_copy_on_write(append)
    >>> checks.check_frontier_reading(gain, told_apart, why, greedy, voted, sampled)
"""

from __future__ import annotations

from collections.abc import Callable

from labkit.checks.common import matching_hint, not_attempted, read_number, verdict
from labkit.checks.work import choice_verdict, progressive, refuse_unmeasured, reset, run_own
from labkit.compute.accuracy import Accuracy
from labkit.compute.choose import self_consistency
from labkit.compute.cow_exercise import BlockTables, copy_on_write_append
from labkit.compute.verifiable import extract_answer, majority_answer

__all__ = ["check_copy_on_write", "check_frontier_reading", "check_majority_vote"]

VOTE_REFERENCES = [majority_answer, extract_answer, self_consistency]
VOTE_CASES = [  # (texts, what each case tests)
    (["55", "54", "55"], "a plain majority"),
    (["55", " 55.", "It is 55", "54", "54"], "the same answer written three ways"),
    (["1,200", "1200", "120", "120"], "thousands separators"),
    (["7.0", "7", "8", "8"], "one number written two ways; a tie goes to the answer seen first"),
    (["I think 12 + 7 = 19", "19", "20", "20"], "the answer is the last number of a text"),
    (
        ["no idea", "", "2", "-3", "-3"],
        "texts without a number do not vote; a minus sign belongs to the number",
    ),
    (["no idea", "pass"], "no text holds a number: there is no answer (None)"),
    (["9", "10", "10", "9"], "a tie goes to the answer seen first"),
]


def check_majority_vote(fn: Callable | None) -> bool:
    """Exercise (14): fn(texts) -> the most common answer among the texts, each normalized as
    labkit.compute.verifiable.extract_answer reads it (the last number, no thousands commas, no trailing
    decimal zeros), a tie to the answer seen first, None when no text holds a number. Calling labkit's own
    majority_answer, extract_answer or self_consistency does not count."""
    if fn is None:
        return not_attempted("your function vote(texts)")
    for texts, what in VOTE_CASES:
        got, error = run_own(fn, list(texts), references=VOTE_REFERENCES)
        if error:
            return verdict(False, f"vote({texts}): {error}")
        expected = majority_answer(texts)
        if got == expected:
            continue
        if got is not None and not isinstance(got, str):
            return verdict(
                False, f"vote({texts}) gave {got!r}: return the answer as text (like '55'), or None."
            )
        raw = max(texts, key=texts.count)
        if got == raw or got == raw.strip():
            return verdict(
                False,
                f"vote({texts}) gave {got!r}: count answers, not texts ({what}). Read the number "
                "out of each text first, written one way.",
            )
        return verdict(
            False,
            f"vote({texts}) gave {got!r}, which is not it ({what}). "
            + progressive(
                "vote",
                [
                    "Read one answer out of each text, write it one way, then count.",
                    "The answer is the last number in a text; drop thousands commas and trailing zeros after a decimal "
                    "point ('7.0' is '7'), keep a minus sign; Counter counts, and of equal counts keep the one seen first.",
                ],
            ),
        )
    reset("vote")
    return verdict(
        True, "answers read out of the texts and written one way, then counted: self-consistency's vote."
    )


# --- copy on write ---------------------------------------------------------------------------------------

PROMPT = [11, 12, 13, 14, 15, 16]  # blocks of 4: one full block and one partly filled
SAMPLES = {"sample 1": [21, 22, 23], "sample 2": [31], "prompt": [41, 42]}  # what each sequence appends
PROMPT_LAST_BLOCK = 1  # the partly filled prompt block: its last holder, the prompt, writes into it in place


def cow_trial(fn: Callable) -> tuple[BlockTables, str | None, dict[str, list[int]]]:
    """Fork the prompt into two samples, append each one's tokens in turns with `fn`; (pool, error, the
    tokens each sequence should hold)."""
    pool = BlockTables.with_prompt("prompt", PROMPT, n_blocks=10, block_size=4)
    pool.fork("prompt", "sample 1")
    pool.fork("prompt", "sample 2")
    for step in range(max(map(len, SAMPLES.values()))):
        for name, tokens in SAMPLES.items():
            if step < len(tokens):
                _, error = run_own(fn, pool, name, tokens[step], references=[copy_on_write_append])
                if error:
                    return pool, f"append(pool, {name!r}, {tokens[step]}): {error}", {}
    return pool, None, {name: PROMPT + tokens for name, tokens in SAMPLES.items()}


def cow_hint(pool: BlockTables, expected: dict[str, list[int]]) -> str | None:
    """What went wrong in a copy-on-write trial, None if nothing did."""
    wrong = {name: pool.tokens(name) for name in expected if pool.tokens(name) != expected[name]}
    if wrong:
        name, tokens = next(iter(wrong.items()))
        foreign = [t for t in tokens if t not in expected[name]]
        if foreign:
            return (
                f"{name!r} now reads {tokens}: it holds {foreign}, another sequence's token(s). Before writing "
                "into a block, ask whether another table holds it too."
            )
        return (
            f"{name!r} now reads {tokens}: its own tokens were lost or reordered when its block was replaced."
        )
    problems = pool.problems()
    if problems:
        return f"every sequence reads the right tokens, but the bookkeeping is off: {problems[0]}."
    if pool.tables["prompt"][0] != pool.tables["sample 1"][0]:
        return "every sequence is right, but the full first block was copied: a full block is never written again."
    if pool.tables["prompt"][-1] != PROMPT_LAST_BLOCK:  # the samples copied it away; the prompt held it alone
        return (
            "every sequence is right, but a block only one table held was copied too: the last holder can "
            "write in place."
        )
    return None


def check_copy_on_write(fn: Callable | None) -> bool:
    """Exercise (14, find the bug): fn(pool, name, token) appends one token to a sequence of a BlockTables
    pool (labkit.compute.cow_exercise), copying a shared last block before writing into it. Checked by
    forking a prompt into two samples and appending in turns: every sequence must read its own tokens, the
    counts must match the tables, nothing may leak, and only what is written may be copied. Calling labkit's
    own copy_on_write_append does not count."""
    if fn is None:
        return not_attempted("your function append(pool, name, token)")
    pool, error, expected = cow_trial(fn)
    if error:
        return verdict(False, error)
    hint = cow_hint(pool, expected)
    if hint:
        return verdict(False, hint)
    return verdict(
        True,
        "a shared block is copied on its first write and released, a full one stays shared, "
        "and the last holder writes in place: the engine's append_slot.",
    )


# --- reading the frontier --------------------------------------------------------------------------------

WHY = {
    "voting works": "the right answer is usually the most common one among the samples",
    "outvoted": "the right answer is often among the samples, but a wrong one is more common",
    "rarely sampled": "the right answer is rarely among the samples at all",
}


def why_voting(voted: Accuracy, greedy: Accuracy, sampled: Accuracy) -> str:
    """Which of WHY the accuracies show: voting beats greedy and the paired test tells them apart; else the
    right answer among the samples (pass@n) at least 15 points above the vote: outvoted; else rarely sampled."""
    if voted.rate > greedy.rate and voted.paired_with(greedy).apart:
        return "voting works"
    return "outvoted" if sampled.rate - voted.rate >= 0.15 else "rarely sampled"


def check_frontier_reading(
    gain, told_apart: bool | None, why: str | None, greedy: Accuracy, voted: Accuracy, sampled: Accuracy
) -> bool:
    """Exercise (14, measure and interpret): gain, the vote's accuracy minus greedy's in percentage points
    (within 0.5); told_apart, whether McNemar's paired test on the same items tells the two apart at the 5 %
    level (voted.paired_with(greedy)); why, one of WHY, read from the vote's, greedy's and pass@n's
    accuracies (the student's own run)."""
    value, refusal = read_number(
        gain,
        "gain (percentage points), told_apart (True or False) and why",
        number="gain as a number of percentage points",
        others=(told_apart,),
    )
    if refusal is not None:
        return refusal
    unmeasured = refuse_unmeasured(
        "score your runs with run.accuracy(...), run.pass_at(...) or frontier(...), as the cells above do",
        greedy=greedy,
        voted=voted,
        sampled=sampled,
    )
    if unmeasured is not None:
        return unmeasured
    expected = 100 * (voted.rate - greedy.rate)
    hints = [
        (expected / 100, "give percentage points (a difference of 5 % and 12 % is 7), not a fraction."),
        (-expected, "the vote's accuracy minus greedy's: the other way round."),
    ]
    if abs(value - expected) > 0.5:
        return verdict(
            False,
            matching_hint(value, hints, rel_tol=0.02)
            or progressive(
                "frontier_gain",
                [
                    f"{value:g} is not what your two accuracies give: read .rate of each (a fraction of the items right).",
                    f"{value:g} is not it: 100 * (voted.rate - greedy.rate).",
                ],
            ),
        )
    if not isinstance(told_apart, bool):
        return verdict(False, f"told_apart must be True or False, not {told_apart!r}.")
    if told_apart != voted.paired_with(greedy).apart:
        return verdict(
            False,
            "the gain is right; now the paired test: only the items where exactly one method was right "
            "tell them apart (voted_accuracy.paired_with(greedy_accuracy) counts them), and apart means "
            "its p-value is under 0.05.",
        )
    return choice_verdict(
        why,
        WHY,
        why_voting(voted, greedy, sampled),
        "set pass@n's accuracy (the right answer among the samples at all) beside the vote's and greedy's.",
        name="why",
        exercise="frontier_gain",
        right_so_far="the gain and the paired test are right",
        passed="a vote can only pick an answer that is among the samples, and only if it is "
        "the most common one.",
    )
