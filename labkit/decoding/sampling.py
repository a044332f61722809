"""Choosing the next token. Transforms only rescale or mask logits; only `greedy` and `sample` choose.

A transform is a pure function `(logits [B, V], ...) -> logits [B, V]`: it returns a new tensor, never
changes its input, and removes a token by setting its logit to -inf. Each one gives the same values as
the transformers logits processor named in its docstring (tests/decoding/test_sampling.py checks it).

    >>> logits = top_p_filter(top_k_filter(apply_temperature(logits, 0.7), 50), 0.9)
    >>> next_ids = sample(torch.softmax(logits, dim=-1), torch.Generator().manual_seed(0))   # [B]

Penalties need the tokens seen so far, token_ids [B, T]; `labkit.decoding` binds the right ids to
each transform and applies them in transformers' order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from labkit.core.doors import check_number, check_tensor

NEG_INF = float("-inf")


# --- choosing ------------------------------------------------------------------------------------


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """logits [B, V] -> token ids [B]: the most likely token (the lowest id on a tie, like argmax)."""
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a tensor [B, V] of scores, got {type(logits).__name__}.")
    return logits.argmax(dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """probs [B, V] -> token ids [B], drawn with the given generator so a seed reproduces a run."""
    if not isinstance(generator, torch.Generator):
        raise TypeError("sample() needs a torch.Generator, e.g. torch.Generator().manual_seed(0).")
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


# --- rescaling -----------------------------------------------------------------------------------

# A positive scale (temperature, repetition penalty) is clamped into [SAFE_SCALE_LOW, SAFE_SCALE_HIGH] before
# it meets float32 logits. Outside that range float32 turns it into 0 or inf, and a masked -inf logit divided
# by inf (or a logit by 0) is NaN. Inside it, every logit stays finite, and the clamp changes no token's
# probability: at 1e30 the distribution is already uniform in float32, at 1e-30 already one-hot.
SAFE_SCALE_LOW, SAFE_SCALE_HIGH = 1e-30, 1e30


def float32_safe(scale: float) -> float:
    """A positive scale clamped into [1e-30, 1e30], where dividing float32 logits by it stays finite.

    >>> float32_safe(8.6e193), float32_safe(0.7)
    (1e+30, 0.7)
    """
    return min(max(scale, SAFE_SCALE_LOW), SAFE_SCALE_HIGH)


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits [B, V] / temperature. Below 1 sharpens the distribution, above 1 flattens it.

    Same as transformers' TemperatureLogitsWarper.
    """
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a tensor [B, V] of scores, got {type(logits).__name__}.")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be > 0 to rescale logits (0 means greedy), got {temperature!r}.")
    return logits / float32_safe(temperature)


# --- truncation: keep the head of the distribution, cut the tail ---------------------------------


def _keep_at_least(remove: torch.Tensor, logits: torch.Tensor, min_tokens_to_keep: int) -> torch.Tensor:
    """Un-remove the min_tokens_to_keep highest logits (and every token tied with the last of them)."""
    k = min(min_tokens_to_keep, logits.shape[-1])
    return remove & (logits < logits.topk(k, dim=-1).values[..., -1:])


def top_k_filter(logits: torch.Tensor, k: int, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Keep the k highest logits (and any tied with the k-th); mask the rest. k=0 keeps everything.

    Fan et al. 2018. Same as transformers' TopKLogitsWarper.

        >>> top_k_filter(torch.tensor([[1.0, 3.0, 2.0]]), 2)
        tensor([[-inf, 3., 2.]])
    """
    if k == 0:
        return logits.clone()
    k = min(max(k, min_tokens_to_keep), logits.shape[-1])
    kth_best = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth_best, NEG_INF)


def top_p_filter(logits: torch.Tensor, p: float, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Nucleus sampling (Holtzman et al. 2020): keep the smallest set of most likely tokens whose
    probability mass reaches p; mask the rest.

    Computed from the bottom, as transformers' TopPLogitsWarper does: sort ascending, and a token goes
    when the mass of it and everything less likely is at most 1 - p. So the kept head holds >= p.

        >>> top_p_filter(torch.log(torch.tensor([[0.5, 0.3, 0.2]])), 0.7)
        tensor([[-0.6931, -1.2040,    -inf]])
    """
    ascending, order = torch.sort(logits, descending=False)
    mass_up_to = ascending.softmax(dim=-1).cumsum(dim=-1)  # mass of this token and all less likely
    remove_sorted = mass_up_to <= (1 - p)
    remove_sorted[..., -min_tokens_to_keep:] = False  # the most likely tokens always stay
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, NEG_INF)


def min_p_filter(logits: torch.Tensor, min_p: float, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Min-p (Nguyen et al. 2024): keep tokens with probability >= min_p x (the top token's probability).

    Confident steps keep few tokens, uncertain steps many. Same as transformers' MinPLogitsWarper.

        >>> min_p_filter(torch.log(torch.tensor([[0.6, 0.3, 0.1]])), 0.2)      # cut-off 0.2 x 0.6 = 0.12
        tensor([[-0.5108, -1.2040,    -inf]])
    """
    check_tensor("logits", logits, "[B, V] of scores")
    check_number("min_p", min_p, minimum=0, maximum=1)
    probs = logits.softmax(dim=-1)
    remove = probs < min_p * probs.amax(dim=-1, keepdim=True)
    k = min(min_tokens_to_keep, probs.shape[-1])
    remove = remove.scatter(-1, probs.topk(k, dim=-1).indices, False)
    return logits.masked_fill(remove, NEG_INF)


def typical_filter(logits: torch.Tensor, mass: float, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Locally typical sampling (Meister et al. 2023): rank tokens by how close their surprise
    -log p is to the entropy H (the *expected* surprise), and keep the closest ones until their mass
    reaches `mass`. Very likely tokens can be cut as well as very unlikely ones.

    Same as transformers' TypicalLogitsWarper.
    """
    check_tensor("logits", logits, "[B, V] of scores")
    check_number("mass", mass, above=0, maximum=1)
    logprobs = logits.log_softmax(dim=-1)
    entropy = -(logprobs * logprobs.exp()).nansum(dim=-1, keepdim=True)  # H = E[-log p]
    distance, order = torch.sort((-logprobs - entropy).abs(), descending=False)  # most typical first
    mass_up_to = logits.gather(-1, order).softmax(dim=-1).cumsum(dim=-1)
    last = (mass_up_to < mass).sum(dim=-1).clamp(max=logits.shape[-1] - 1)  # first index reaching mass
    remove_sorted = distance > distance.gather(-1, last[..., None])
    remove_sorted[..., :min_tokens_to_keep] = False
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, NEG_INF)


def epsilon_filter(logits: torch.Tensor, epsilon: float, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Epsilon sampling (Hewitt et al. 2022): keep tokens with probability >= epsilon, a fixed floor.

    Same as transformers' EpsilonLogitsWarper.
    """
    remove = logits.softmax(dim=-1) < epsilon
    return logits.masked_fill(_keep_at_least(remove, logits, min_tokens_to_keep), NEG_INF)


def eta_filter(logits: torch.Tensor, epsilon: float, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Eta sampling (Hewitt et al. 2022): a floor that adapts to the entropy H of the distribution,
    eta = min(epsilon, sqrt(epsilon) * exp(-H)) (their eq. 5); keep tokens with probability >= eta.

    Same as transformers' EtaLogitsWarper.
    """
    probs = logits.softmax(dim=-1)
    entropy = torch.distributions.Categorical(logits=logits).entropy()[..., None]
    epsilon_t = torch.tensor(epsilon, dtype=logits.dtype, device=logits.device)
    eta = torch.minimum(epsilon_t, epsilon_t.sqrt() * torch.exp(-entropy))
    return logits.masked_fill(_keep_at_least(probs < eta, logits, min_tokens_to_keep), NEG_INF)


# --- penalties: they need the tokens seen so far, token_ids [B, T] ------------------------------


def repetition_penalty(logits: torch.Tensor, token_ids: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL's repetition penalty (Keskar et al. 2019): every token that occurs in token_ids [B, T] has
    its logit divided by `penalty` if positive, multiplied by it if negative (so it always becomes
    less likely for penalty > 1). Applied once per token, however often it occurred.

    transformers passes the prompt and the generated tokens. Same as RepetitionPenaltyLogitsProcessor.
    """
    seen = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, token_ids, True)
    penalty = float32_safe(penalty)
    penalized = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalized, logits)


def presence_frequency_penalty(
    logits: torch.Tensor, token_ids: torch.Tensor, presence: float = 0.0, frequency: float = 0.0
) -> torch.Tensor:
    """OpenAI's penalties, counting the tokens in token_ids [B, T] (the *generated* tokens):

        logit[j] -= count[j] * frequency + (count[j] > 0) * presence

    Positive values discourage repeats (frequency more so for each repeat), negative encourage them.
    transformers has no such processor; the formula is OpenAI's API documentation's.

        >>> presence_frequency_penalty(torch.zeros(1, 3), torch.tensor([[2, 2]]), 0.5, 0.25)
        tensor([[ 0.,  0., -1.]])
    """
    counts = torch.zeros_like(logits).scatter_add(
        -1, token_ids, torch.ones_like(token_ids, dtype=logits.dtype)
    )
    return logits - counts * frequency - (counts > 0).to(logits.dtype) * presence


def no_repeat_ngram(logits: torch.Tensor, token_ids: torch.Tensor, n: int) -> torch.Tensor:
    """Ban every token that would repeat an n-gram already in token_ids [B, T] (fairseq's rule).

    If the last n-1 tokens occurred before, the tokens that followed them then are masked.
    Same as transformers' NoRepeatNGramLogitsProcessor.
    """
    out = logits.clone()
    if token_ids.shape[-1] < n:
        return out
    for row, ids in enumerate(token_ids.tolist()):
        prefix = tuple(ids[len(ids) - n + 1 :])  # the n-1 most recent tokens
        banned = [ids[i + n - 1] for i in range(len(ids) - n + 1) if tuple(ids[i : i + n - 1]) == prefix]
        out[row, banned] = NEG_INF
    return out


def logit_bias(logits: torch.Tensor, bias: Mapping[int, float]) -> torch.Tensor:
    """Add bias[token_id] to that token's logit (OpenAI's `logit_bias`; -100 all but bans a token).

    Same as transformers' SequenceBiasLogitsProcessor with one-token sequences.
    """
    delta = torch.zeros(logits.shape[-1], dtype=logits.dtype, device=logits.device)
    if bias:
        delta[list(bias)] = torch.tensor(list(bias.values()), dtype=logits.dtype, device=logits.device)
    return logits + delta


def ban_tokens(logits: torch.Tensor, token_ids: Iterable[int]) -> torch.Tensor:
    """Mask the given token ids, so they can never be chosen.

    Same as transformers' NoBadWordsLogitsProcessor with one-token words.
    """
    out = logits.clone()
    out[..., list(token_ids)] = NEG_INF
    return out


def min_new_tokens_filter(
    logits: torch.Tensor, n_generated: int, min_new_tokens: int, eos_token_ids: Iterable[int]
) -> torch.Tensor:
    """Mask the end-of-sequence token(s) while fewer than min_new_tokens tokens have been generated.

    Same as transformers' MinNewTokensLengthLogitsProcessor.
    """
    if n_generated >= min_new_tokens:
        return logits.clone()
    return ban_tokens(logits, eos_token_ids)
