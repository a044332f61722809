"""Speculative decoding: a cheap drafter proposes gamma tokens, the target checks them in ONE forward pass.

Speculative sampling (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
Decoding"; Chen et al. 2023, "Accelerating Large Language Model Decoding with Speculative Sampling"):
each draft token x ~ q is kept with probability min(1, p(x) / q(x)); the first rejected one is replaced by
a draw from the residual norm(max(0, p - q)); when all gamma are kept, a bonus token is drawn from p.
The output has exactly the target's distribution p, whatever the drafter proposes: a good drafter only
makes it faster. With temperature 0 the rule becomes "keep drafts while they equal the target's argmax".

    >>> from labkit.drafters import PromptLookupDrafter
    >>> result = speculative_generate(model, tokenizer, prompt, PromptLookupDrafter(), gamma=4, max_new_tokens=48)
    >>> result.text, result.stats.acceptance_rate, result.stats.tokens_per_call
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from labkit.decoding import DecodingConfig, apply_transforms
from labkit.generate import context_length, encode_prompt, eos_token_ids
from labkit.llama import Llama
from labkit.sampling import sample

# --- one step of the algorithm, on given distributions (pure functions) -----------------------------


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) [B, V] for p, q [B, V]: where a rejected draft is resampled from.

    Leviathan et al. 2023, Algorithm 1 (p'(x) = norm(max(0, p(x) - q(x)))). Where p == q the residual is
    empty, but then no draft is ever rejected; p is returned there so the result is always a distribution.

        >>> residual_distribution(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.9, 0.1]]))
        tensor([[0., 1.]])
    """
    residual = (p - q).clamp(min=0)
    mass = residual.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, residual / mass.clamp(min=1e-30), p)


def accept_or_resample(p: torch.Tensor, q: torch.Tensor, draft_tokens: torch.Tensor,
                       generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep or replace each draft token: p, q [B, V] target and draft probabilities, draft_tokens [B] ~ q.

    Returns (accepted [B] bool, token [B]): the draft token where accepted, else a residual draw.
    Vectorized over B independent draws (tests check the output is distributed as p).

        >>> accepted, tokens = accept_or_resample(p, q, torch.multinomial(q, 1).squeeze(-1), generator)
    """
    p_x = p.gather(-1, draft_tokens[:, None]).squeeze(-1)
    q_x = q.gather(-1, draft_tokens[:, None]).squeeze(-1)
    u = torch.rand(p_x.shape, generator=generator)
    accepted = u * q_x < p_x  # u < min(1, p(x) / q(x)), written without dividing (Leviathan et al. 2023, Alg. 1)
    tokens = draft_tokens.clone()
    if not bool(accepted.all()):
        rejected = ~accepted
        tokens[rejected] = sample(residual_distribution(p[rejected], q[rejected]), generator)
    return accepted, tokens


def verify(target_probs: torch.Tensor, draft_tokens: Sequence[int], draft_probs: torch.Tensor | None,
           generator: torch.Generator) -> tuple[int, int]:
    """One verification: target_probs [n+1, V] (row i scores draft token i; row n is the bonus row),
    draft_probs [n, V], or None for a deterministic drafter (then q is one-hot on each draft token, so a
    draft is kept with probability p(x) and the residual is p with x zeroed, renormalized).

    Returns (how many drafts were accepted, the target's own next token: resampled or bonus).
    """
    n = len(draft_tokens)
    tokens = torch.tensor(list(draft_tokens), dtype=torch.long)
    if draft_probs is None:
        draft_probs = F.one_hot(tokens, target_probs.shape[-1]).to(target_probs.dtype)
    for i in range(n):
        accepted, token = accept_or_resample(target_probs[i:i + 1], draft_probs[i:i + 1], tokens[i:i + 1], generator)
        if not bool(accepted[0]):
            return i, int(token[0])
    return n, int(sample(target_probs[n:n + 1], generator)[0])  # every draft kept: a bonus token from p


def verify_greedy(target_logits: torch.Tensor, draft_tokens: Sequence[int]) -> tuple[int, int]:
    """Temperature 0: keep drafts while each equals the target's argmax; then the target's argmax.

    The same rule as `verify` with p one-hot on the argmax: min(1, p(x)/q(x)) is 1 if x is the argmax,
    else 0, and max(0, p - q) is the argmax itself. target_logits [n+1, V].
    """
    best = target_logits.argmax(dim=-1).tolist()
    for i, token in enumerate(draft_tokens):
        if token != best[i]:
            return i, best[i]
    return len(draft_tokens), best[len(draft_tokens)]


# --- the decoding policy both models share ----------------------------------------------------------


@dataclass
class Policy:
    """How logits become a choice, applied identically to the target's and the draft's logits."""

    transforms: list[Callable] = field(default_factory=list)  # from DecodingConfig.transforms()
    temperature: float = 0.0  # 0 = greedy (the transforms then hold only penalties, if any)
    generator: torch.Generator = field(default_factory=torch.Generator)  # all the run's randomness

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def logits(self, logits: torch.Tensor, context: Sequence[int], drafts: Sequence[int] = ()) -> torch.Tensor:
        """logits [n, V] -> transformed [n, V] (float32, CPU); row i follows context + drafts[:i]."""
        logits = logits.float().cpu()
        if not self.transforms:
            return logits
        rows = [apply_transforms(logits[i:i + 1], torch.tensor([list(context) + list(drafts[:i])]), self.transforms)
                for i in range(logits.shape[0])]
        return torch.cat(rows)

    def probs(self, logits: torch.Tensor, context: Sequence[int], drafts: Sequence[int] = ()) -> torch.Tensor:
        """Sampling distributions [n, V]: softmax of the transformed logits (temperature included)."""
        return torch.softmax(self.logits(logits, context, drafts), dim=-1)


# --- a model with its cache: feed tokens, crop back -------------------------------------------------


class CachedModel:
    """A causal LM and the token ids it has seen, with labkit's KVCache (cropped on rejection).

    A transformers model recomputes the whole prefix instead (correct, slower: the prefix-recompute path).
    """

    def __init__(self, model: torch.nn.Module, max_length: int):
        self.model, self.ids = model, []
        self.cache = model.new_cache(1, max_length) if isinstance(model, Llama) else None

    def feed(self, new_ids: Sequence[int]) -> torch.Tensor:
        """Append new_ids; return the logits [len(new_ids), V] after each of them (float32, CPU)."""
        device = next(self.model.parameters()).device
        with torch.no_grad():
            if self.cache is not None:
                logits = self.model(torch.tensor([list(new_ids)], device=device), self.cache)[0]
            else:
                all_ids = torch.tensor([self.ids + list(new_ids)], device=device)
                logits = self.model(input_ids=all_ids, use_cache=False).logits[0, -len(new_ids):]
        self.ids += list(new_ids)
        return logits.float().cpu()

    def crop(self, length: int) -> None:
        """Forget every token after the first `length`."""
        if self.cache is not None:
            self.cache.crop(length)
        del self.ids[length:]


# --- statistics ----------------------------------------------------------------------------------


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
    target_calls: int = 0  # verification forward passes of the target (the prompt's prefill not counted)
    new_tokens: int = 0  # tokens produced
    wall_s: float = 0.0  # seconds, prefill included
    steps: list[DraftStep] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        """alpha: the fraction of proposed draft tokens the target kept (0 when none were proposed)."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_call(self) -> float:
        """New tokens per target forward pass (plain decoding: 1)."""
        return self.new_tokens / self.target_calls if self.target_calls else 0.0


@dataclass(frozen=True)
class SpeculativeResult:
    token_ids: list[int]  # the generated ids (EOS included when it ended the run)
    text: str  # their text
    stats: SpeculativeStats


def expected_tokens_per_step(alpha: float, gamma: int) -> float:
    """E[tokens per target call] = (1 - alpha^(gamma+1)) / (1 - alpha) (Leviathan et al. 2023, eq. 1).

        >>> expected_tokens_per_step(0.8, 4)
        3.3616...
    """
    if alpha >= 1:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


# --- the loop ------------------------------------------------------------------------------------


def speculative_generate(target: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
                         prompt: str | Sequence[int] | torch.Tensor, drafter, gamma: int = 4,
                         max_new_tokens: int = 64, temperature: float = 0.0, seed: int | None = None,
                         generator: torch.Generator | None = None, adaptive: bool = False,
                         **options) -> SpeculativeResult:
    """Generate with a drafter (labkit.drafters) and the target (labkit's Llama, or any causal LM).

    gamma: draft tokens proposed per target call (at least 1); with adaptive=True the most per call, the
        number adapting as transformers' "heuristic" schedule does: +2 after a round with every draft
        kept, -1 (down to 1) after a rejection, so a drafter that keeps missing wastes little.
    temperature / seed / generator / options: as in `labkit.generate` (top_k, top_p, penalties, ...);
        the same transforms shape the target's and the draft's distributions. 0 = greedy: the output is
        token for token the target's own greedy output.

        >>> speculative_generate(model, tokenizer, "Repeat: a b c d", PromptLookupDrafter(), gamma=4).stats
    """
    prompt_ids = encode_prompt(tokenizer, prompt)
    _check_arguments(target, drafter, gamma, max_new_tokens, len(prompt_ids))
    config = DecodingConfig(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, **options)
    if config.num_beams > 1:
        raise ValueError("speculative_generate() samples or decodes greedily; num_beams must be 1.")
    eos_ids = eos_token_ids(target, tokenizer)
    policy = Policy(config.transforms(len(prompt_ids), eos_ids), config.temperature,
                    generator if generator is not None else config.generator())
    drafter.prepare(target, tokenizer, policy)  # checks vocabulary, device, dtype before any work
    start = time.perf_counter()
    runner = CachedModel(target, min(len(prompt_ids) + max_new_tokens + gamma + 1, context_length(target)))
    if len(prompt_ids) > 1:
        runner.feed(prompt_ids[:-1])  # the last prompt token goes in with the first drafts
    out, stats, draft_length = [], SpeculativeStats(), gamma
    while len(out) < max_new_tokens and not (out and out[-1] in eos_ids):
        context = prompt_ids + out
        room = max_new_tokens - len(out) - 1  # the target always adds one token of its own
        drafts, q = drafter.propose(context, min(draft_length, room)) if room > 0 else ([], None)
        drafts = list(drafts)[:room]
        logits = runner.feed([context[-1]] + drafts)  # ONE target pass scores every draft and the bonus
        stats.target_calls += 1
        if policy.greedy:
            n, token = verify_greedy(policy.logits(logits, context, drafts), drafts)
        else:
            n, token = verify(policy.probs(logits, context, drafts), drafts, None if q is None else q[:len(drafts)],
                              policy.generator)
        runner.crop(len(context) + n)  # roll back the rejected drafts' keys and values
        if adaptive and drafts:
            draft_length = min(gamma, draft_length + 2) if n == len(drafts) else max(1, draft_length - 1)
        stats.steps.append(DraftStep(tuple(drafts), n, token, n == len(drafts)))
        stats.proposed, stats.accepted = stats.proposed + len(drafts), stats.accepted + n
        for new in drafts[:n] + [token]:
            out.append(new)
            if new in eos_ids:
                break
    stats.new_tokens, stats.wall_s = len(out), time.perf_counter() - start
    text = tokenizer.decode([t for t in out if t not in eos_ids])
    return SpeculativeResult(out, text, stats)


def _check_arguments(target, drafter, gamma: int, max_new_tokens: int, prompt_length: int) -> None:
    from labkit.drafters import Drafter  # drafters builds on this module

    if not isinstance(target, torch.nn.Module) or not hasattr(target, "config"):
        raise TypeError(f"target must be a causal LM (labkit's Llama or a transformers model), got "
                        f"{type(target).__name__}. Load one with labkit.load_model(...).")
    if not isinstance(drafter, Drafter):
        raise TypeError(f"drafter must have propose(context_ids, gamma) and prepare(target, tokenizer, policy), got "
                        f"{type(drafter).__name__}. Use one from labkit.drafters, e.g. PromptLookupDrafter().")
    if not isinstance(gamma, int) or isinstance(gamma, bool) or gamma < 1:
        raise ValueError(f"gamma (draft tokens per target call) must be an integer >= 1, got {gamma!r}.")
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}.")
    if prompt_length + max_new_tokens > context_length(target):
        raise ValueError(f"The prompt has {prompt_length} tokens and {max_new_tokens} new ones were asked for; the "
                         f"model's context holds {context_length(target)}. Shorten the prompt or ask for fewer.")
