"""Exercise checkers for the speculative decoding lab, notebook 09 (see labkit/checks/foundation.py for the style)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from labkit.checks.common import not_attempted, verdict
from labkit.speculative.drafters import PromptLookupDrafter
from labkit.speculative.rule import expected_tokens_per_step, residual_distribution

__all__ = ["check_expected_tokens", "check_residual", "check_prompt_lookup"]


def _call(fn: Callable, *args):
    """(result, None) or (None, a hint naming the exception): a student's bug is a hint, never a crash."""
    try:
        return fn(*args), None
    except Exception as error:  # noqa: BLE001
        return None, f"calling it with {args} raised {type(error).__name__}: {error}"


def check_expected_tokens(fn: Callable | None) -> bool:
    """Exercise: fn(alpha, gamma) -> expected tokens per target call, for 0 <= alpha < 1."""
    if fn is None:
        return not_attempted("your function expected_tokens(alpha, gamma)")
    for alpha, gamma in [(0.0, 4), (0.5, 1), (0.8, 4), (0.9, 10), (0.3, 2)]:
        got, error = _call(fn, alpha, gamma)
        if error:
            return verdict(False, error)
        expected = expected_tokens_per_step(alpha, gamma)
        if not isinstance(got, (int, float)) or not math.isclose(float(got), expected, rel_tol=1e-6):
            if isinstance(got, (int, float)) and math.isclose(float(got), expected - 1, rel_tol=1e-6):
                return verdict(False, "you count only accepted drafts; every call also adds the target's own token "
                                       "(a resample or the bonus): the sum starts at alpha^0 = 1.")
            if isinstance(got, (int, float)) and math.isclose(float(got), alpha * gamma + 1, rel_tol=1e-6):
                return verdict(False, "acceptance stops at the first rejection: draft i counts only if all before "
                                       "it were accepted too, with probability alpha^i, not alpha.")
            return verdict(False, f"expected_tokens({alpha}, {gamma}) gave {got!r}, which is not it. Draft i is "
                                   "accepted with probability alpha^i (all before it accepted too), and the target "
                                   "adds its own token: sum alpha^i for i = 0..gamma.")
    return verdict(True, "E = 1 + alpha + ... + alpha^gamma = (1 - alpha^(gamma+1)) / (1 - alpha).")


def check_residual(fn: Callable | None) -> bool:
    """Exercise: fn(p, q) -> the distribution [V] a rejected draft is resampled from, for p, q [V]."""
    if fn is None:
        return not_attempted("your function residual(p, q)")
    cases = [(torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.2, 0.6])),
             (torch.tensor([0.1, 0.6, 0.3]), torch.tensor([0.0, 1.0, 0.0])),  # a deterministic draft: q one-hot
             (torch.tensor([0.25, 0.25, 0.25, 0.25]), torch.tensor([0.7, 0.1, 0.1, 0.1]))]
    for p, q in cases:
        got, error = _call(fn, p.clone(), q.clone())
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
            return verdict(False, "resampling from p itself would over-weight the tokens the draft already "
                                   "proposes often; take max(0, p - q), normalized.")
        flipped = (q - p).clamp(min=0)
        if float(flipped.sum()) > 0 and torch.allclose(got.float(), flipped / flipped.sum(), atol=1e-5):
            return verdict(False, "the other way round: keep where the target p exceeds the draft q, max(0, p - q), "
                                   "the mass the draft under-proposes.")
        return verdict(False, f"for p={p.tolist()}, q={q.tolist()} your distribution is "
                               f"{[round(v, 3) for v in got.float().tolist()]}: take max(0, p - q) elementwise, then "
                               "divide by its sum.")
    return verdict(True, "norm(max(0, p - q)); with a one-hot draft it is p with the drafted token removed.")


def check_prompt_lookup(fn: Callable | None, max_ngram_size: int = 3) -> bool:
    """Exercise: fn(context_ids, gamma) -> draft ids: the tokens after the most recent earlier occurrence of the
    longest suffix n-gram (n = max_ngram_size down to 1), or [] when nothing matches."""
    if fn is None:
        return not_attempted("your function lookup(context_ids, gamma)")
    reference = PromptLookupDrafter(max_ngram_size)
    cases = [([5, 7, 8, 9, 10, 11, 6, 7, 8], 3), ([1, 2, 3, 9, 0, 2, 3, 5, 1, 2, 3], 2), ([4, 1, 4, 2, 4], 1),
             ([1, 2, 3, 4, 5], 4), ([5, 7, 8, 9, 6, 7, 8], 10)]
    for context, gamma in cases:
        got, error = _call(fn, list(context), gamma)
        if error:
            return verdict(False, error)
        expected = reference.propose(context, gamma)[0]
        if list(got or []) != expected:
            hint = ("return at most gamma tokens" if len(list(got or [])) > gamma else
                    "draft only what followed an earlier occurrence of the context's last n tokens (never the "
                    "suffix itself), with nothing to draft when there is none" if not expected else
                    "try the longest n-gram first, and among its matches the most recent one (never the suffix "
                    "itself); return at most gamma tokens")
            return verdict(False, f"lookup({context}, {gamma}) gave {got!r}: {hint}.")
    return verdict(True, "your lookup proposes what labkit.speculative.drafters.PromptLookupDrafter proposes.")
