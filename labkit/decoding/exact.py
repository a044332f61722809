"""Exact search on short horizons: the greedy sequence's log-probability, and the true most likely
continuation (MAP) by best-first search, to compare with what greedy and beam search find (notebook 03).

    >>> greedy_search(model, tokenizer, prompt_ids, max_new_tokens=10).logprob
    >>> exact_map(model, tokenizer, prompt_ids, horizon=4).best
    >>> empty_answer_logprob(model, tokenizer, prompt_ids)           # log p(EOS first): the empty answer
    >>> first_divergence(model, prompt_ids, greedy.token_ids, beam.best.token_ids).step
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.doors import check_items, check_model
from labkit.core.forward import all_logits
from labkit.core.text import encode_prompt, eos_token_ids
from labkit.decoding.generate import generate
from labkit.decoding.request import Prompt
from labkit.decoding.search import Hypothesis


def greedy_search(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, prompt: Prompt, max_new_tokens: int = 32
) -> Hypothesis:
    """The greedy sequence with its log-probability (score = logprob, no length penalty).

    >>> greedy_search(model, tokenizer, prompt_ids, max_new_tokens=10).logprob
    """
    steps = list(generate(model, tokenizer, prompt, max_new_tokens=max_new_tokens))
    logprob = sum(step.logprob for step in steps)
    return Hypothesis(tuple(s.token_id for s in steps), logprob, logprob)


def sequence_logprob(model: torch.nn.Module, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> float:
    """log p(token_ids | prompt_ids) under the model, summed over the tokens (one forward pass)."""
    if not token_ids:
        return 0.0
    logprobs = torch.log_softmax(all_logits(model, list(prompt_ids) + list(token_ids)), dim=-1)
    rows = logprobs[len(prompt_ids) - 1 : -1]
    return float(rows.gather(-1, torch.tensor(list(token_ids))[:, None]).sum())


@dataclass(frozen=True)
class MapResult:
    best: Hypothesis  # the most probable sequence of at most `horizon` tokens
    expansions: int  # forward passes the search needed
    lower_bound: Hypothesis  # the greedy sequence it started from (a first candidate)


def exact_map(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt: Prompt,
    horizon: int = 4,
    max_expansions: int = 2000,
) -> MapResult:
    """The exact most probable continuation (MAP) among those that end with EOS within `horizon` tokens
    or have exactly `horizon` tokens: best-first search (uniform-cost search, Dijkstra).

    A prefix's log p only falls as it grows, so the first *complete* sequence popped off the priority
    queue is the most probable one. The greedy sequence gives a first complete candidate, so any prefix
    already less likely than it is never pushed. Feasible for short horizons only: each expansion is
    one forward pass.

        >>> exact_map(model, tokenizer, labkit.chat_prompt(tokenizer, "Say hi"), horizon=4).best
    """
    check_int("horizon", horizon, minimum=1)
    check_int("max_expansions", max_expansions, minimum=1)
    prompt_ids = encode_prompt(tokenizer, prompt)
    eos = eos_token_ids(model, tokenizer)
    greedy_hypothesis = greedy_search(model, tokenizer, prompt_ids, max_new_tokens=horizon)
    bound = greedy_hypothesis.logprob  # a complete sequence: nothing less likely can be the answer
    queue: list[tuple[float, tuple[int, ...]]] = [(-0.0, ())]
    expansions = 0
    while queue:
        negative, tokens = heapq.heappop(queue)
        if len(tokens) == horizon or (tokens and tokens[-1] in eos):
            return MapResult(Hypothesis(tokens, -negative, -negative), expansions, greedy_hypothesis)
        if expansions >= max_expansions:
            raise RuntimeError(
                f"exact_map needed more than max_expansions={max_expansions} forward passes; "
                "use a shorter horizon or raise max_expansions."
            )
        expansions += 1
        logprobs = torch.log_softmax(all_logits(model, prompt_ids + list(tokens))[-1], dim=-1) - negative
        for token in torch.nonzero(logprobs >= bound - 1e-3).flatten().tolist():
            heapq.heappush(queue, (-float(logprobs[token]), tokens + (token,)))
    raise AssertionError("unreachable: the greedy sequence is always in the queue")


def empty_answer_logprob(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, prompt: Prompt) -> float:
    """log p(empty answer | prompt): the probability that the very first answer token ends the answer
    (any EOS token, e.g. <|im_end|>), summed over the EOS tokens. One forward pass. For many inputs of
    an NMT model the empty translation is the exact MAP (Stahlberg & Byrne 2019).

        >>> empty_answer_logprob(model, tokenizer, labkit.chat_prompt(tokenizer, "Hi!"))   # about -14.6
    """
    prompt_ids = encode_prompt(tokenizer, prompt)
    logprobs = torch.log_softmax(all_logits(model, prompt_ids)[-1], dim=-1)  # [V]
    return float(torch.logsumexp(logprobs[sorted(eos_token_ids(model, tokenizer))], dim=0))


@dataclass(frozen=True)
class Divergence:
    """Where two continuations of one prompt part: the first step at which their tokens differ."""

    step: int  # 1-based position of the first differing token
    first_token: int  # the first sequence's token there (e.g. greedy's)
    first_logprob: float  # its log p given the shared prefix
    second_token: int  # the second sequence's token there (e.g. beam search's)
    second_logprob: float
    first_total: float  # log p of the whole first sequence
    second_total: float


def token_logprobs_of(
    model: torch.nn.Module, prompt_ids: Sequence[int], token_ids: Sequence[int]
) -> list[float]:
    """log p(token_t | prompt, tokens_<t) for each of token_ids [T] (one forward pass)."""
    logprobs = torch.log_softmax(all_logits(model, list(prompt_ids) + list(token_ids)), dim=-1)
    rows = logprobs[len(prompt_ids) - 1 : -1]  # [T, V]: row t scores token t
    return rows.gather(-1, torch.tensor(list(token_ids))[:, None])[:, 0].tolist()


def first_divergence(
    model: torch.nn.Module, prompt_ids: Sequence[int], first: Sequence[int], second: Sequence[int]
) -> Divergence:
    """The first step where `first` and `second` (token ids after prompt_ids) differ, each token's
    log p there, and both sequences' total log p. Raises ValueError if one is a prefix of the other.

        >>> split = first_divergence(model, prompt_ids, greedy.token_ids, beam.best.token_ids)
        >>> split.step, split.first_logprob, split.second_total > split.first_total
    """
    check_model("model", model)
    for name, ids in (("prompt_ids", prompt_ids), ("first", first), ("second", second)):
        check_items(name, ids, "token ids (int)", of=int)
    step = next((t for t, (a, b) in enumerate(zip(first, second)) if a != b), None)
    if step is None:
        raise ValueError("The two sequences never differ: one is a prefix of the other.")
    first_lp, second_lp = (
        token_logprobs_of(model, prompt_ids, first),
        token_logprobs_of(model, prompt_ids, second),
    )
    return Divergence(
        step + 1,
        int(first[step]),
        first_lp[step],
        int(second[step]),
        second_lp[step],
        sum(first_lp),
        sum(second_lp),
    )
