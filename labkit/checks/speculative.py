"""Exercise checkers for the speculative decoding lab, notebook 09 (see labkit/checks/foundation.py for the style)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from labkit.checks.common import matching_hint, not_attempted, read_number, verdict
from labkit.checks.work import progressive, refuse_unmeasured, reset, run_own
from labkit.speculative.drafters import PromptLookupDrafter
from labkit.speculative.rule import accept_or_resample, expected_tokens_per_step, residual_distribution

__all__ = [
    "check_expected_tokens",
    "check_residual",
    "check_prompt_lookup",
    "check_accept_rule",
    "check_predicted_speedup",
]


def check_expected_tokens(fn: Callable | None) -> bool:
    """Exercise: fn(alpha, gamma) -> expected tokens per target call, for 0 <= alpha < 1. Calling labkit's own
    expected_tokens_per_step does not count."""
    if fn is None:
        return not_attempted("your function expected_tokens(alpha, gamma)")
    for alpha, gamma in [(0.0, 4), (0.5, 1), (0.8, 4), (0.9, 10), (0.3, 2)]:
        got, error = run_own(fn, alpha, gamma, name_args=True, references=[expected_tokens_per_step])
        if error:
            return verdict(False, error)
        expected = expected_tokens_per_step(alpha, gamma)
        if not isinstance(got, (int, float)) or not math.isclose(float(got), expected, rel_tol=1e-6):
            if isinstance(got, (int, float)) and math.isclose(float(got), expected - 1, rel_tol=1e-6):
                return verdict(
                    False,
                    "you count only accepted drafts; every call also adds the target's own token "
                    "(a resample or the bonus): the sum starts at alpha^0 = 1.",
                )
            if isinstance(got, (int, float)) and math.isclose(float(got), alpha * gamma + 1, rel_tol=1e-6):
                return verdict(
                    False,
                    "acceptance stops at the first rejection: draft i counts only if all before "
                    "it were accepted too, with probability alpha^i, not alpha.",
                )
            return verdict(
                False,
                f"expected_tokens({alpha}, {gamma}) gave {got!r}, which is not it. "
                + progressive(
                    "expected_tokens",
                    [
                        "When is draft i kept, and what does every target call add whatever happens?",
                        "Draft i is kept with probability alpha^i (all before it kept too), and the "
                        "target adds its own token: sum alpha^i for i = 0..gamma.",
                    ],
                ),
            )
    reset("expected_tokens")
    return verdict(True, "E = 1 + alpha + ... + alpha^gamma = (1 - alpha^(gamma+1)) / (1 - alpha).")


def check_residual(fn: Callable | None) -> bool:
    """Exercise: fn(p, q) -> the distribution [V] a rejected draft is resampled from, for p, q [V]. Calling
    labkit's own residual_distribution does not count."""
    if fn is None:
        return not_attempted("your function residual(p, q)")
    cases = [
        (torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.2, 0.6])),
        (torch.tensor([0.1, 0.6, 0.3]), torch.tensor([0.0, 1.0, 0.0])),  # a deterministic draft: q one-hot
        (torch.tensor([0.25, 0.25, 0.25, 0.25]), torch.tensor([0.7, 0.1, 0.1, 0.1])),
    ]
    for p, q in cases:
        got, error = run_own(fn, p.clone(), q.clone(), name_args=True, references=[residual_distribution])
        if error:
            return verdict(False, error)
        if not isinstance(got, torch.Tensor) or got.shape != p.shape:
            return verdict(False, f"return a tensor of shape {tuple(p.shape)}, got {type(got).__name__}.")
        expected = residual_distribution(p[None], q[None])[0]
        if torch.allclose(got.float(), expected, atol=1e-5):
            continue
        if torch.allclose(got.float(), (p - q).clamp(min=0), atol=1e-5):
            return verdict(False, "max(0, p - q) is right, but it must be a distribution: divide by its sum.")
        if torch.allclose(got.float(), p, atol=1e-5):
            return verdict(
                False,
                "resampling from p itself would over-weight the tokens the draft already "
                "proposes often; take max(0, p - q), normalized.",
            )
        flipped = (q - p).clamp(min=0)
        if float(flipped.sum()) > 0 and torch.allclose(got.float(), flipped / flipped.sum(), atol=1e-5):
            return verdict(
                False,
                "the other way round: keep where the target p exceeds the draft q, max(0, p - q), "
                "the mass the draft under-proposes.",
            )
        return verdict(
            False,
            f"for p={p.tolist()}, q={q.tolist()} your distribution is "
            f"{[round(v, 3) for v in got.float().tolist()]}. "
            + progressive(
                "residual",
                [
                    "Which tokens does the draft propose less often than the target wants, and by "
                    "how much? The resample makes up exactly that shortfall.",
                    "Take max(0, p - q) elementwise, then divide by its sum.",
                ],
            ),
        )
    return verdict(True, "norm(max(0, p - q)); with a one-hot draft it is p with the drafted token removed.")


def check_prompt_lookup(fn: Callable | None, max_ngram_size: int = 3) -> bool:
    """Exercise: fn(context_ids, gamma) -> draft ids: the tokens after the most recent earlier occurrence of the
    longest suffix n-gram (n = max_ngram_size down to 1), or [] when nothing matches."""
    if fn is None:
        return not_attempted("your function lookup(context_ids, gamma)")
    reference = PromptLookupDrafter(max_ngram_size)
    own = [PromptLookupDrafter.propose, PromptLookupDrafter.__init__]
    cases = [
        ([5, 7, 8, 9, 10, 11, 6, 7, 8], 3),
        ([1, 2, 3, 9, 0, 2, 3, 5, 1, 2, 3], 2),
        ([4, 1, 4, 2, 4], 1),
        ([1, 2, 3, 4, 5], 4),
        ([5, 7, 8, 9, 6, 7, 8], 10),
    ]
    for context, gamma in cases:
        got, error = run_own(fn, list(context), gamma, name_args=True, references=own)
        if error:
            return verdict(False, error)
        expected = reference.propose(context, gamma)[0]
        if list(got or []) != expected:
            hint = (
                "return at most gamma tokens"
                if len(list(got or [])) > gamma
                else "draft only what followed an earlier occurrence of the context's last n tokens (never the "
                "suffix itself), with nothing to draft when there is none"
                if not expected
                else "try the longest n-gram first, and among its matches the most recent one (never the suffix "
                "itself); return at most gamma tokens"
            )
            return verdict(False, f"lookup({context}, {gamma}) gave {got!r}: {hint}.")
    return verdict(
        True, "your lookup proposes what labkit.speculative.drafters.PromptLookupDrafter proposes."
    )


_RULE_CASES = [
    (torch.tensor([0.55, 0.15, 0.12, 0.10, 0.08]), torch.tensor([0.30, 0.35, 0.05, 0.25, 0.05])),
    (torch.tensor([0.70, 0.30, 0.00]), torch.tensor([0.20, 0.30, 0.50])),  # a draft the target never picks
]
_RULE_DRAWS = 20_000


def _rounded(probs: torch.Tensor) -> list[float]:
    return [round(v, 2) for v in probs.tolist()]


def _rule_hint(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, accepted: torch.Tensor, tokens: torch.Tensor
) -> str | None:
    """What is wrong with one (p, q) case's accept/resample output, or None when it follows the theory."""
    if not torch.equal(tokens[accepted], drafts[accepted]):
        return "a kept draft must come out as itself: where accepted is True, the token is the draft token."
    for x in range(len(p)):
        drafted = drafts == x
        n = int(drafted.sum())
        if n < 200:
            continue
        rate, want = float(accepted[drafted].float().mean()), min(1.0, float(p[x] / q[x]))
        if abs(rate - want) <= 4 * math.sqrt(want * (1 - want) / n) + 0.01:
            continue
        seen = f"token {x} (draft q = {float(q[x]):.2f}, target p = {float(p[x]):.2f})"
        if p[x] >= q[x]:
            return (
                f"{seen} is drafted no more often than the target would choose it, yet your rule rejected "
                f"{1 - rate:.0%} of its drafts. What should the rule do with a draft the target likes at least "
                "as much as the drafter does?"
            )
        return (
            f"{seen} is drafted more often than the target would choose it, and your rule kept {rate:.0%} of "
            f"its drafts: too {'many' if rate > want else 'few'}. Over all its drafts, the kept ones should add "
            "up to exactly the target's own probability of that token, no more."
        )
    counts = torch.bincount(tokens, minlength=len(p)).float() / len(tokens)
    x = int((counts - p).abs().argmax())
    if abs(float(counts[x] - p[x])) > 0.015:
        return (
            f"drafts are kept at the right rates, but token {x} comes out {float(counts[x]):.1%} of the time where "
            f"the target gives it p = {float(p[x]):.2f}: the tokens that replace rejected drafts are off. Which "
            "tokens is the kept-draft mass short of, and by how much?"
        )
    return None


def check_accept_rule(fn: Callable | None) -> bool:
    """Exercise (find the bug): fn(p [B, V], q [B, V], draft_tokens [B] ~ q, generator) -> (accepted [B] bool,
    tokens [B]), the accept/resample rule of labkit.speculative.rule.accept_or_resample. Run on 20,000 drafts
    of a few (p, q) pairs: each draft must be kept at the rate min(1, p/q), and the output must follow p.
    Calling labkit's own accept_or_resample does not count."""
    if fn is None:
        return not_attempted("your function accept(p, q, draft_tokens, generator)")
    for p, q in _RULE_CASES:
        generator = torch.Generator().manual_seed(0)
        drafts = torch.multinomial(
            q.repeat(_RULE_DRAWS, 1), 1, replacement=True, generator=generator
        ).squeeze(-1)
        result, error = run_own(
            fn,
            p.repeat(_RULE_DRAWS, 1),
            q.repeat(_RULE_DRAWS, 1),
            drafts.clone(),
            generator,
            references=[accept_or_resample],
        )
        if error:
            return verdict(False, f"with p = {_rounded(p)}, q = {_rounded(q)}: {error}")
        if not (
            isinstance(result, tuple)
            and len(result) == 2
            and all(isinstance(t, torch.Tensor) and t.shape == drafts.shape for t in result)
        ):
            return verdict(
                False,
                f"return a pair (accepted, tokens) of tensors of shape {tuple(drafts.shape)}, "
                "one entry per draft.",
            )
        hint = _rule_hint(p, q, drafts, result[0].bool(), result[1].long())
        if hint:
            return verdict(False, f"with p = {_rounded(p)}, q = {_rounded(q)}: {hint}")
    return verdict(
        True,
        "each draft is kept at the rate min(1, p/q), and the output follows p, as "
        "labkit.speculative.rule.accept_or_resample does.",
    )


def _speedup_slips(alpha: float, gamma: int, c: float, v: float) -> list[tuple[float, str]]:
    """(what a recognised slip gives, its hint) for the predicted speed-up E(alpha, gamma) / (gamma c + v)."""
    tokens = expected_tokens_per_step(alpha, gamma)
    return [
        (
            tokens / (gamma * c + 1),
            "verifying gamma + 1 tokens costs v(gamma + 1) target steps (section 1), not 1.",
        ),
        (tokens, "that is tokens per call, not speed: a round also costs something, in target steps."),
        (
            (tokens - 1) / (gamma * c + v),
            "every round also yields the target's own token: E counts it (alpha^0 = 1).",
        ),
        (tokens / (c + v), "each of the gamma drafts costs c."),
        (
            (1 + alpha * gamma) / (gamma * c + v),
            "draft i counts only if every draft before it was accepted too.",
        ),
    ]


def check_predicted_speedup(
    answer: float | None, worth_it: bool | None, stats, gamma: int, c: float, v: float
) -> bool:
    """Exercise (09): the cost model's speed-up E(alpha, gamma) / (gamma c + v), with alpha read off the run's
    own statistics (stats.acceptance_rate, a SpeculativeStats), within 2 %; and worth_it, whether speculating
    pays for this task (True or False), as that prediction says."""
    value, refusal = read_number(
        answer,
        "the predicted speed-up (a number such as 1.3) and worth_it (True or False)",
        others=(worth_it,),
    )
    if refusal is not None:
        return refusal
    unmeasured = refuse_unmeasured(
        "run speculative_generate(...), draft_cost(...) and verification_costs(...), as the cells above do",
        stats=stats,
        c=c,
        v=v,
    )
    if unmeasured is not None:
        return unmeasured
    alpha = stats.acceptance_rate
    expected = expected_tokens_per_step(alpha, gamma) / (gamma * c + v)
    if abs(value - expected) > 0.02 * abs(expected):
        return verdict(
            False,
            matching_hint(value, _speedup_slips(alpha, gamma, c, v), rel_tol=0.02)
            or progressive(
                "predicted_speedup",
                [
                    f"{value:g} is not what your run's alpha and costs give. Speed-up = the tokens a round yields over what "
                    "a round costs, both counted in target steps.",
                    f"{value:g} is not it. Speed-up = E(alpha, gamma) / (gamma c + v(gamma + 1)), with "
                    "E = 1 + alpha + ... + alpha^gamma.",
                ],
            ),
        )
    reset("predicted_speedup")
    if not isinstance(worth_it, bool):
        return verdict(False, f"the speed-up is right; answer worth_it with True or False, not {worth_it!r}.")
    if worth_it != (expected > 1):
        return verdict(
            False,
            "the speed-up is right, but worth_it does not follow from it: what does a speed-up "
            "of that size mean against plain decoding?",
        )
    return verdict(
        True,
        f"alpha = {alpha:.3f} over {stats.proposed} drafts. The prediction leaves out the prefill "
        "of the prompt, which both paths pay once.",
    )
