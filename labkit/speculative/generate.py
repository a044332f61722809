"""Speculative decoding: a cheap drafter proposes gamma tokens, the target checks them in ONE forward pass.

The rule that keeps the output exactly the target's distribution is in `labkit.speculative.rule`; the
drafters in `labkit.speculative.drafters`. This module runs the loop and counts what happened.

    >>> from labkit.speculative.drafters import PromptLookupDrafter
    >>> result = speculative_generate(model, tokenizer, prompt, drafter=PromptLookupDrafter(), gamma=4,
    ...                               max_new_tokens=48)
    >>> result.text, result.stats.acceptance_rate, result.stats.tokens_per_call
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.forward import CachedSequence, context_length
from labkit.decoding.config import DecodingConfig
from labkit.decoding.request import Prompt, check_generator, check_request
from labkit.run_log import record_result
from labkit.speculative.drafters import PromptLookupDrafter
from labkit.speculative.policy import SamplingPolicy
from labkit.speculative.rule import expected_tokens_per_step, verify, verify_greedy
from labkit.timing import clock


@runtime_checkable
class Drafter(Protocol):
    """What speculative_generate needs from a drafter (labkit.speculative.drafters has three)."""

    def prepare(
        self, target: nn.Module, tokenizer: PreTrainedTokenizerBase | None, policy: SamplingPolicy
    ) -> None:
        """Called once before generating: raise a clear error if the drafter cannot serve this target."""

    def propose(self, context_ids: list[int], gamma: int) -> tuple[list[int], torch.Tensor | None]:
        """Up to gamma draft tokens after context_ids, and their distributions q [n, V] (None: one-hot).
        gamma = 0 proposes nothing: speculative_generate calls it so during the prefill, where a model
        drafter reads the prompt into its cache."""


@dataclass(frozen=True)
class DraftStep:
    """One draft-then-verify round, as the notebook draws it."""

    proposed: tuple[int, ...]  # the drafter's tokens
    accepted: int  # how many of them the target kept (a prefix)
    token: int  # the target's own token after them: a resample at the first rejection, or the bonus
    bonus: bool  # True when every draft was kept (then `token` is the bonus)


@dataclass
class SpeculativeStats:
    """Counts and time of one speculative run."""

    proposed: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens the target kept
    rejected: int = 0  # drafts checked and rejected: at most one per round (the drafts after it go unchecked)
    target_calls: int = 0  # verification forward passes of the target (the prompt's prefill not counted)
    new_tokens: int = 0  # tokens produced
    wall_s: float = 0.0  # seconds, prefill included
    steps: list[DraftStep] = field(default_factory=list)
    gamma: int = 0  # draft tokens asked for per call (the most per call when adaptive)
    prefill_s: float = 0.0  # seconds of the prompt's pass before the first round (the drafter's included)

    def record(self, step: DraftStep) -> None:
        """Count one draft-then-verify round (one target call)."""
        self.steps.append(step)
        self.target_calls += 1
        self.proposed, self.accepted = self.proposed + len(step.proposed), self.accepted + step.accepted
        self.rejected += step.accepted < len(step.proposed)

    @property
    def acceptance_rate(self) -> float:
        """alpha: accepted / (accepted + rejected), over the draft positions the target verified (0 when none
        were): the per-position probability of Leviathan et al.'s eq. 1. Drafts after a rejection were never
        checked and do not count; `kept_fraction` counts them.

            >>> stats.acceptance_rate   # 4 drafts, the 2nd rejected: 1 / (1 + 1) = 0.5
        """
        verified = self.accepted + self.rejected
        return self.accepted / verified if verified else 0.0

    @property
    def kept_fraction(self) -> float:
        """accepted / proposed: the share of all draft tokens that were kept, unchecked ones included."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def empty_rounds(self) -> int:
        """Rounds in which the drafter proposed nothing: the target call then makes one token, as plain decoding."""
        return sum(not step.proposed for step in self.steps)

    @property
    def tokens_per_call(self) -> float:
        """New tokens per target forward pass (plain decoding: 1)."""
        return self.new_tokens / self.target_calls if self.target_calls else 0.0

    @property
    def formula_tokens_per_call(self) -> float:
        """Leviathan et al.'s E(alpha, gamma) at this run's alpha and gamma: the tokens per call if every round
        proposed gamma drafts, each kept independently with probability alpha (compare tokens_per_call).

            >>> stats.acceptance_rate, stats.gamma, stats.formula_tokens_per_call
            (0.8, 4, 3.3616)
        """
        return expected_tokens_per_step(self.acceptance_rate, self.gamma)

    @property
    def decode_s(self) -> float:
        """Seconds of the rounds alone: wall_s without the prefill. They make all new_tokens (the first
        round also feeds the prompt's last token, as plain decoding's first step feeds the first new one)."""
        return self.wall_s - self.prefill_s


@dataclass(frozen=True)
class SpeculativeResult:
    token_ids: list[int]  # the generated ids (EOS included when it ended the run)
    text: str  # their text
    stats: SpeculativeStats


def speculative_generate(
    target: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt: Prompt,
    config: DecodingConfig | None = None,
    *,
    drafter: Drafter | None = None,
    gamma: int = 4,
    adaptive: bool = False,
    generator: torch.Generator | None = None,
    **options,
) -> SpeculativeResult:
    """Generate with a drafter and the target (labkit's Llama, or any causal LM).

    config / options: as in `labkit.generate` (max_new_tokens, temperature, top_k, top_p, penalties, seed);
        the same transforms shape the target's and the draft's distributions. temperature 0 = greedy: the
        output is token for token the target's own greedy output.
    drafter: from labkit.speculative.drafters (default: PromptLookupDrafter()).
    gamma: draft tokens proposed per target call (at least 1); with adaptive=True the most per call, the
        number adapting as transformers' "heuristic" schedule does: +2 after a round with every draft
        kept, -1 (down to 1) after a rejection, so a drafter that keeps missing wastes little.

        >>> speculative_generate(model, tokenizer, "Repeat: a b c d", drafter=PromptLookupDrafter(), gamma=4).stats
    """
    drafter = PromptLookupDrafter() if drafter is None else drafter
    _check_arguments(target, drafter, gamma)
    request = check_request(target, tokenizer, prompt, config, options, "speculative_generate")
    check_generator(generator)
    config, prompt_ids = request.config, request.prompt_ids
    if config.num_beams > 1 or config.stop:
        raise ValueError(
            "speculative_generate() samples or decodes greedily without stop strings; "
            "num_beams must be 1 and stop empty."
        )
    policy = SamplingPolicy(
        config.transforms(len(prompt_ids), request.eos_ids),
        config.temperature,
        generator if generator is not None else config.generator(),
    )
    drafter.prepare(target, tokenizer, policy)  # checks vocabulary, device, dtype before any work
    start = clock()
    sequence = CachedSequence(
        target, min(len(prompt_ids) + config.max_new_tokens + gamma + 1, context_length(target))
    )
    if len(prompt_ids) > 1:  # the prefill; the last prompt token goes in with the first drafts
        sequence.run(prompt_ids[:-1])
        drafter.propose(prompt_ids[:-1], 0)  # a model drafter reads the prompt now too; no draft
    stats = SpeculativeStats(gamma=gamma, prefill_s=clock() - start)
    out = _rounds(
        sequence, drafter, policy, prompt_ids, config.max_new_tokens, request.eos_ids, adaptive, stats
    )
    stats.new_tokens, stats.wall_s = len(out), clock() - start
    text = tokenizer.decode([t for t in out if t not in request.eos_ids])
    return SpeculativeResult(out, text, record_result(stats))  # the run log keeps the measured statistics


def _rounds(
    sequence: CachedSequence,
    drafter: Drafter,
    policy: SamplingPolicy,
    prompt_ids: list[int],
    max_new_tokens: int,
    eos_ids: frozenset[int],
    adaptive: bool,
    stats: SpeculativeStats,
) -> list[int]:
    """Draft-then-verify rounds after the prefill until max_new_tokens or an end-of-sequence token; each
    round recorded in `stats` (whose `gamma` is the most drafts per round). Returns the new token ids."""
    out, draft_length = [], stats.gamma
    while len(out) < max_new_tokens and not (out and out[-1] in eos_ids):
        step = _draft_and_verify(
            sequence, drafter, policy, prompt_ids + out, max_new_tokens - len(out), draft_length
        )
        stats.record(step)
        if adaptive and step.proposed:  # transformers' "heuristic" schedule
            draft_length = min(stats.gamma, draft_length + 2) if step.bonus else max(1, draft_length - 1)
        for new in step.proposed[: step.accepted] + (step.token,):
            out.append(new)
            if new in eos_ids:
                break
    return out


def _draft_and_verify(
    sequence: CachedSequence,
    drafter: Drafter,
    policy: SamplingPolicy,
    context: list[int],
    remaining: int,
    draft_length: int,
) -> DraftStep:
    """One round: the drafter proposes, ONE target pass scores every draft and the bonus, the rule decides."""
    room = remaining - 1  # the target always adds one token of its own
    drafts, q = drafter.propose(context, min(draft_length, room)) if room > 0 else ([], None)
    drafts = list(drafts)[:room]
    logits = sequence.run([context[-1]] + drafts)
    if policy.is_greedy:
        n, token = verify_greedy(policy.logits(logits, context, drafts), drafts)
    else:
        n, token = verify(
            policy.probs(logits, context, drafts),
            drafts,
            None if q is None else q[: len(drafts)],
            policy.generator,
        )
    sequence.crop(len(context) + n)  # roll back the rejected drafts' keys and values
    return DraftStep(tuple(drafts), n, token, n == len(drafts))


def _check_arguments(target, drafter, gamma: int) -> None:
    if not isinstance(target, torch.nn.Module) or not hasattr(target, "config"):
        raise TypeError(
            f"target must be a causal LM (labkit's Llama or a transformers model), got "
            f"{type(target).__name__}. Load one with labkit.load_model(...)."
        )
    if not isinstance(drafter, Drafter):
        raise TypeError(
            f"drafter must have propose(context_ids, gamma) and prepare(target, tokenizer, policy), got "
            f"{type(drafter).__name__}. Use one from labkit.speculative.drafters, e.g. "
            "PromptLookupDrafter()."
        )
    check_int("gamma", gamma, minimum=1, note="draft tokens per target call")
