"""The accept/resample rule of speculative sampling, on given distributions (pure functions).

Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding"; Chen et al. 2023,
"Accelerating Large Language Model Decoding with Speculative Sampling": each draft token x ~ q is kept
with probability min(1, p(x) / q(x)); the first rejected one is replaced by a draw from the residual
norm(max(0, p - q)); when all gamma are kept, a bonus token is drawn from p. The output has exactly the
target's distribution p, whatever the drafter proposes. With temperature 0 the rule becomes "keep
drafts while they equal the target's argmax".

    >>> accepted, tokens = accept_or_resample(p, q, torch.multinomial(q, 1).squeeze(-1), generator)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from labkit.core.arguments import check_int
from labkit.core.doors import check_number
from labkit.decoding.sampling import sample


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


def accept_or_resample(
    p: torch.Tensor, q: torch.Tensor, draft_tokens: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep or replace each draft token: p, q [B, V] target and draft probabilities, draft_tokens [B] ~ q.

    Returns (accepted [B] bool, token [B]): the draft token where accepted, else a residual draw.
    Vectorized over B independent draws (tests check the output is distributed as p).

        >>> accepted, tokens = accept_or_resample(p, q, torch.multinomial(q, 1).squeeze(-1), generator)
    """
    p_x = p.gather(-1, draft_tokens[:, None]).squeeze(-1)
    q_x = q.gather(-1, draft_tokens[:, None]).squeeze(-1)
    u = torch.rand(p_x.shape, generator=generator)
    # u < min(1, p(x) / q(x)), written without dividing (Leviathan et al. 2023, Alg. 1)
    accepted = u * q_x < p_x
    tokens = draft_tokens.clone()
    if not bool(accepted.all()):
        rejected = ~accepted
        tokens[rejected] = sample(residual_distribution(p[rejected], q[rejected]), generator)
    return accepted, tokens


def rule_frequencies(
    p: torch.Tensor, q: torch.Tensor, draws: int, generator: torch.Generator
) -> tuple[float, torch.Tensor]:
    """Run the accept/resample rule on `draws` drafts x ~ q, for p, q [V]: (the share of drafts kept, the
    frequency of each output token [V]). Section 3 of notebook 09 compares the frequencies with p.

        >>> kept, frequencies = rule_frequencies(p, q, 20_000, torch.Generator().manual_seed(0))
        >>> kept, torch.minimum(p, q).sum()          # both about 0.65
    """
    check_int("draws", draws, minimum=1)
    drafts = torch.multinomial(q.expand(draws, -1), 1, replacement=True, generator=generator).squeeze(-1)
    accepted, tokens = accept_or_resample(p.expand(draws, -1), q.expand(draws, -1), drafts, generator)
    return accepted.float().mean().item(), torch.bincount(tokens, minlength=p.shape[-1]).float() / draws


def verify(
    target_probs: torch.Tensor,
    draft_tokens: Sequence[int],
    draft_probs: torch.Tensor | None,
    generator: torch.Generator,
) -> tuple[int, int]:
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
        accepted, token = accept_or_resample(
            target_probs[i : i + 1], draft_probs[i : i + 1], tokens[i : i + 1], generator
        )
        if not bool(accepted[0]):
            return i, int(token[0])
    return n, int(sample(target_probs[n : n + 1], generator)[0])  # every draft kept: a bonus token from p


def verify_greedy(target_logits: torch.Tensor, draft_tokens: Sequence[int]) -> tuple[int, int]:
    """Temperature 0: keep drafts while each equals the target's argmax; then the target's argmax.

    The same rule as `verify` with p one-hot on the argmax: min(1, p(x)/q(x)) is 1 if x is the argmax,
    else 0, and max(0, p - q) is the argmax itself. target_logits [n+1, V].
    """
    return accept_greedy(draft_tokens, target_logits.argmax(dim=-1).tolist())


def accept_greedy(draft_tokens: Sequence[int], choices: Sequence[int]) -> tuple[int, int]:
    """Keep drafts while each equals the target's own greedy choice at its position; return (drafts kept,
    the target's choice after them). choices: n + 1 token ids, the last one after every draft.

        >>> accept_greedy([4, 8, 15], [4, 8, 9, 16])
        (2, 9)
    """
    for i, token in enumerate(draft_tokens):
        if token != choices[i]:
            return i, choices[i]
    return len(draft_tokens), choices[len(draft_tokens)]


def expected_tokens_per_step(alpha: float, gamma: int) -> float:
    """E[tokens per target call] = (1 - alpha^(gamma+1)) / (1 - alpha) (Leviathan et al. 2023, eq. 1).

    >>> expected_tokens_per_step(0.8, 4)
    3.3616...
    """
    check_number("alpha", alpha, minimum=0, maximum=1)
    check_int("gamma", gamma, minimum=0)
    if alpha >= 1:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)
