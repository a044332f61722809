"""Exercise checkers for the generation loop, notebook 02 (see labkit/checks/foundation.py for the style).

A write-exercise's function is run with labkit's own answer watched for: calling it does not count. A
measurement is timed again by the checker, so made-up seconds do not pass.

    >>> checks.check_greedy_loop(my_greedy, model, tokenizer)
    ✅ Correct: your loop matches labkit.generate, one prefill and then one token per forward pass: ...
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import PreTrainedTokenizerBase

from labkit.checks.common import not_attempted, verdict
from labkit.checks.work import choice_verdict, progressive, refuse_unmeasured, reset, run_own
from labkit.core.forward import NoCache, decode_step, greedy_decode, prefill
from labkit.core.text import encode_prompt
from labkit.decoding import generate as generate_module
from labkit.decoding.search import beam_search
from labkit.timing import time_once

__all__ = ["check_next_token_probs", "check_greedy_loop", "check_cache_speedup"]

# labkit's own loops: a my_greedy that calls one of them has not written the loop
LABKIT_LOOPS = (
    generate_module.generate,
    generate_module.generate_ids,
    generate_module.generate_text,
    greedy_decode,
    beam_search,
)
TIMING_FACTOR = (
    3.0  # a student's time may differ from the checker's own re-run by this factor (a loaded machine)
)
GAP_CHOICES = {
    "grow": "a longer prompt makes the cached loop's advantage larger",
    "shrink": "a longer prompt makes it smaller",
    "same": "the prompt's length does not change it",
}


def check_next_token_probs(
    fn: Callable | None, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> bool:
    """Exercise: fn(model, input_ids [1, T]) -> probabilities [V] of the next token."""
    if fn is None:
        return not_attempted("your function next_token_probs(model, input_ids)")
    input_ids = torch.tensor([encode_prompt(tokenizer, "The capital of France is")])
    with torch.no_grad():
        expected = torch.softmax(model(input_ids).logits[0, -1].float(), dim=-1)
        got, error = run_own(fn, model, input_ids, references=LABKIT_LOOPS)
    if error:
        return verdict(False, error)
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        return verdict(
            False,
            f"return a tensor of shape {tuple(expected.shape)}, not {shape}. "
            "Take the logits of the last position only.",
        )
    if abs(float(got.sum()) - 1) > 1e-3:
        return verdict(
            False, f"probabilities must sum to 1 (yours sum to {float(got.sum()):.3f}): apply softmax."
        )
    if not torch.allclose(got.float(), expected, atol=1e-5):
        return verdict(
            False,
            progressive(
                "next_token_probs",
                [
                    "the values differ: the next token is predicted by the last position only.",
                    "the values differ. Use the logits at position -1, softmax over the vocabulary dimension.",
                ],
            ),
        )
    return verdict(True, f"the most likely next token is {tokenizer.decode(int(expected.argmax()))!r}.")


def _tokens_fed(model: torch.nn.Module) -> tuple[list[int], Callable[[], None]]:
    """A list that fills with the number of tokens each forward pass of `model` is fed, and the function
    that stops recording."""
    fed: list[int] = []

    def record(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if isinstance(ids, torch.Tensor):
            fed.append(int(ids.shape[-1]))

    return fed, model.register_forward_pre_hook(record, with_kwargs=True).remove


def check_greedy_loop(
    fn: Callable | None, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, n_tokens: int = 8
) -> bool:
    """Exercise: fn(model, prompt_ids: list[int], n_tokens) -> the n_tokens greedy token ids, with a KV cache:
    the first forward pass reads the prompt, every later one a single new token (the checker counts them).
    A function that calls labkit.generate (or another of labkit's loops) does not count."""
    if fn is None:
        return not_attempted("your function my_greedy(model, prompt_ids, n_tokens)")
    prompt_ids = encode_prompt(tokenizer, "Once upon a time")
    expected = generate_module.generate_ids(model, tokenizer, prompt_ids, max_new_tokens=n_tokens)
    fed, stop_recording = _tokens_fed(model)
    try:
        with torch.no_grad():
            got, error = run_own(fn, model, list(prompt_ids), n_tokens, references=LABKIT_LOOPS)
    finally:
        stop_recording()
    if error:
        return verdict(False, error)
    try:
        got = [int(t) for t in got]
    except (TypeError, ValueError):
        return verdict(False, f"return a list of {n_tokens} token ids (ints), not {type(got).__name__}.")
    if len(got) != len(expected):
        return verdict(False, f"return exactly {n_tokens} new token ids (not the prompt), got {len(got)}.")
    if got != expected:
        first = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
        return verdict(
            False,
            f"token {first} differs from greedy decoding (yours is {got[first]}). "
            + progressive(
                "greedy_loop",
                [
                    "Greedy takes the single most likely next token, then reads it as input for the next.",
                    "Append each chosen token to the input before the next forward pass, and take argmax "
                    "at position -1.",
                ],
            ),
        )
    if not fed:
        return verdict(
            False,
            "the tokens are right, but the checker saw no forward pass of the model it gave "
            "you: run `model` itself, so the checker can count what each pass is fed.",
        )
    refed = [n for n in fed[1:] if n > 1]
    if refed:
        return verdict(
            False,
            f"the tokens are right, but after the first pass your loop fed the model {refed[0]} "
            "tokens at once: the whole sequence again. Keep the keys and values of what the "
            "model has read in a KV cache (labkit.prefill returns one) and feed each step only "
            "the token just chosen (labkit.decode_step).",
        )
    reset("greedy_loop")
    return verdict(
        True,
        f"your loop matches labkit.generate, one prefill and then one token per forward pass: "
        f"{tokenizer.decode(got)!r}.",
    )


def loop_seconds(model: torch.nn.Module, prompt_ids: list[int], n_tokens: int) -> tuple[float, float]:
    """The checker's own timing of greedy decoding without and with a KV cache (after one warm-up step).

    >>> loop_seconds(model, long_prompt, 16)
    (4.9, 0.8)
    """
    ids = torch.tensor([list(prompt_ids)])

    def greedy(cache) -> None:
        logits, cache = prefill(model, ids, cache, max_length=ids.shape[1] + n_tokens)
        for _ in range(n_tokens - 1):
            logits = decode_step(model, logits.argmax(-1), cache)

    with torch.no_grad():
        prefill(model, ids)  # warm-up
        seconds = []
        for cache in (NoCache(), None):  # None: prefill makes the model's own KV cache
            seconds.append(time_once(lambda: greedy(cache))[1])
    return seconds[0], seconds[1]


def _far_from(theirs: float, mine: float, factor: float = TIMING_FACTOR) -> bool:
    """Whether a time is more than `factor` times longer or shorter than the checker's own re-run."""
    return not mine / factor <= theirs <= mine * factor


def speedup_miss(answer: float, seconds_without_cache: float, seconds_with_cache: float) -> bool:
    """The verdict on a speed-up that is not the ratio of the two times: the usual slips named, else a hint."""
    expected = seconds_without_cache / seconds_with_cache
    if abs(answer - 1 / expected) <= 0.03 / expected:
        return verdict(
            False,
            "that is the ratio the other way round: how many times longer does the loop "
            "without a cache take?",
        )
    if abs(answer - (seconds_without_cache - seconds_with_cache)) <= 1e-3 + 0.03 * abs(answer):
        return verdict(
            False, "that is the time saved, in seconds; the question asks for a ratio of two times."
        )
    return verdict(
        False,
        progressive(
            "cache_speedup",
            [
                "not yet. A speed-up compares the two times you measured, not their difference.",
                "not yet. A speed-up is a ratio of two times: the slow loop's time over the fast one's.",
            ],
        ),
    )


def check_cache_speedup(
    answer: float | None,
    seconds_without_cache: float | None,
    seconds_with_cache: float | None,
    model: torch.nn.Module,
    prompt_ids: list[int],
    n_tokens: int = 16,
    gap: str | None = None,
) -> bool:
    """Exercise (02): how many times faster is the loop with a KV cache than the one that re-feeds everything,
    and would the gap grow or shrink with a longer prompt? Both times must be measured in this kernel (labkit.run_log),
    each within a factor 3 of the checker's own timing of both loops on `model` and `prompt_ids`."""
    if seconds_without_cache is None or seconds_with_cache is None:
        return not_attempted("the two measured times (in seconds)")
    if answer is None:
        return not_attempted("how many times faster the cached loop is")
    times = {"seconds_without_cache": seconds_without_cache, "seconds_with_cache": seconds_with_cache}
    if (unmeasured := refuse_unmeasured("time both loops with the cell's seconds(...)", **times)) is not None:
        return unmeasured
    mine_without, mine_with = loop_seconds(model, prompt_ids, n_tokens)
    if _far_from(seconds_without_cache, mine_without) or _far_from(seconds_with_cache, mine_with):
        return verdict(
            False,
            "the checker timed both loops again on your model and prompt, and at least one of "
            "your times is more than 3 times off: time the loops themselves with seconds(...), "
            "on this machine, and use what it returns.",
        )
    expected = seconds_without_cache / seconds_with_cache
    if abs(answer - expected) > 0.03 * expected:
        return speedup_miss(answer, seconds_without_cache, seconds_with_cache)
    return choice_verdict(
        gap,
        GAP_CHOICES,
        "grow",
        "what does a step without the cache feed the model, and how does that change with the prompt's length? "
        "And a cached step?",
        name="gap",
        exercise="cache_speedup",
        right_so_far="your speed-up is right",
        passed=f"{expected:.1f}x faster; the checker's own re-run of both loops gave {mine_without / mine_with:.1f}x "
        "on this machine.",
    )
