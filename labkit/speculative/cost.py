"""What a speculative round costs, in target decode steps, and the speed-up that predicts.

Plain decoding pays one 1-token target pass per token. A speculative round pays gamma draft guesses
(c target steps each) and one verification pass over gamma + 1 tokens (v target steps), and yields
E(alpha, gamma) tokens on average (Leviathan et al. 2023, eq. 1), so

    speed-up = E(alpha, gamma) / (gamma c + v)

Leviathan et al. take v = 1 (a memory-bound pass costs the same for 1 or gamma + 1 tokens); here both
c and v are measured on this machine, each as a median of interleaved repeats.

    >>> v = verification_costs(model, [1, 3, 5])                          # {1: 1.0, 3: 1.4, 5: 1.5}
    >>> c = draft_cost(early_exit_drafter(model, 4), model, tokenizer, prompt_ids, gamma=2)
    >>> predicted_speedup(0.8, 4, c, v[5])
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from numbers import Integral

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.doors import check_items, check_model, check_number, check_record
from labkit.core.forward import CachedSequence, vocab_size
from labkit.run_log import record
from labkit.speculative.generate import Drafter, DraftStep
from labkit.speculative.policy import SamplingPolicy
from labkit.speculative.rule import expected_tokens_per_step
from labkit.timing import interleaved_seconds


def _pass(model: nn.Module, n_tokens: int, context: int) -> Callable[[], None]:
    """A run() of one forward pass over n_tokens new tokens after `context` cached ones (random ids)."""
    ids = torch.randint(
        0, vocab_size(model), (context + n_tokens,), generator=torch.Generator().manual_seed(0)
    )
    sequence = CachedSequence(model, context + n_tokens)
    sequence.run(ids[:context].tolist())

    def run() -> None:
        sequence.crop(context)  # forget the new tokens, as a rejected draft is rolled back
        sequence.run(ids[context:].tolist())

    return run


def verification_costs(
    model: nn.Module, n_tokens: Sequence[int], context: int = 64, repeats: int = 5
) -> dict[int, float]:
    """v(n): the median time of one pass over n new tokens / the median time of a 1-token decode step.

    n_tokens: the pass sizes to measure (a verification of gamma drafts is gamma + 1 tokens). Every
    size is timed once per round, with the 1-token step, for `repeats` rounds after a warm-up round.

        >>> verification_costs(model, [1, 2, 5])
        {1: 1.0, 2: 1.38, 5: 1.52}
    """
    check_model("model", model)
    check_items("n_tokens", n_tokens, "pass sizes in tokens (whole numbers)", of=Integral)
    sizes = sorted({1, *n_tokens})
    if sizes[0] < 1:
        raise ValueError(f"n_tokens must be positive numbers of tokens, got {list(n_tokens)}.")
    seconds = interleaved_seconds([_pass(model, n, context) for n in sizes], repeats, warmup=True)
    medians = {n: statistics.median(s) for n, s in zip(sizes, seconds)}
    costs = {n: medians[n] / medians[1] for n in sizes if n in n_tokens or n == 1}
    record(costs.values())  # measured ratios: a checker finds them in the run log
    return costs


def draft_cost(
    drafter: Drafter,
    target: nn.Module,
    tokenizer: PreTrainedTokenizerBase | None,
    context_ids: Sequence[int],
    gamma: int,
    repeats: int = 5,
) -> float:
    """c: the drafter's seconds per guess / the target's seconds per 1-token decode step (medians).

    Times drafter.propose(context_ids, gamma) as speculative_generate calls it (greedy policy), against
    one target step after the same context, interleaved. A model drafter's cache already holds the
    context, so a call runs gamma draft steps; prompt lookup only searches the ids. Divided by gamma.

        >>> draft_cost(early_exit_drafter(model, 4), model, tokenizer, prompt_ids, gamma=2)
        0.3
    """
    check_record("drafter", drafter, "a Drafter (labkit.speculative.drafters)", has=("prepare", "propose"))
    check_model("target", target)
    context = list(context_ids)
    drafter.prepare(target, tokenizer, SamplingPolicy())
    drafter.propose(context, gamma)  # fills a model drafter's cache with the context
    sequence = CachedSequence(target, len(context) + 1)
    sequence.run(context[:-1])

    def target_step() -> None:
        sequence.crop(len(context) - 1)
        sequence.run(context[-1:])

    guess, step = interleaved_seconds(
        [lambda: drafter.propose(context, gamma), target_step], repeats, warmup=True
    )
    cost = statistics.median(guess) / gamma / statistics.median(step)
    record([cost])  # a measured ratio: a checker finds it in the run log
    return cost


def predicted_speedup(alpha: float, gamma: int, draft_cost: float, verify_cost: float) -> float:
    """E(alpha, gamma) / (gamma c + v): speed-up over plain decoding when every round proposes gamma drafts.

    >>> predicted_speedup(0.8, 4, draft_cost=0.0, verify_cost=1.0)   # free draft, free verification
    3.3616
    """
    check_number("alpha", alpha, minimum=0, maximum=1)
    check_int("gamma", gamma, minimum=0)
    check_number("draft_cost", draft_cost, minimum=0)
    check_number("verify_cost", verify_cost, above=0)
    return expected_tokens_per_step(alpha, gamma) / (gamma * draft_cost + verify_cost)


def rounds_speedup(steps: Sequence[DraftStep], draft_cost: float, verify_costs: Mapping[int, float]) -> float:
    """The same cost model on the rounds that actually ran: tokens made / sum of (n c + v(n + 1)).

    steps: SpeculativeStats.steps; a round with n drafts costs n guesses and a pass over n + 1 tokens,
    so rounds with no draft cost one plain step. verify_costs must hold v for every n + 1 that occurs.

        >>> rounds_speedup(stats.steps, 0.0, {1: 1.0, 5: 1.5})
    """
    check_items("steps", steps, "DraftStep (SpeculativeStats.steps)", has=("proposed", "accepted"))
    if not steps:
        raise ValueError("rounds_speedup needs at least one round (SpeculativeStats.steps).")
    missing = sorted({len(s.proposed) + 1 for s in steps} - set(verify_costs))
    if missing:
        raise ValueError(
            f"verify_costs has no cost for passes of {missing} tokens; measure them with "
            f"verification_costs(model, {missing})."
        )
    tokens = sum(step.accepted + 1 for step in steps)
    cost = sum(len(step.proposed) * draft_cost + verify_costs[len(step.proposed) + 1] for step in steps)
    return tokens / cost
