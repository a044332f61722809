"""Mirostat (Basu et al. 2021): sampling that steers the *surprise* of each token towards a target.

The surprise of a token is -log2 p (in bits). Fixed top-k or top-p let it drift: low-surprise text gets
repetitive ("boredom trap"), high-surprise text incoherent ("confusion trap"). Mirostat keeps a running
threshold mu and, after every token, moves it against the error (a feedback controller):

    mu <- mu - eta * (surprise - tau)           tau: the target surprise, eta: the learning rate

- v2 (Algorithm 2 of the paper, as llama.cpp implements it): keep tokens with surprise <= mu.
- v1 (Algorithm 1): estimate the Zipf exponent s of the distribution and pick the top-k whose
  expected surprise is mu: k = ((e * 2^mu) / (1 - N^-e))^(1/s), with e = s - 1 and N the vocabulary.

The truncation is a transform like any other (`mirostat_v2_filter`, `mirostat_v1_filter`), `sample`
chooses, and `mirostat_update` moves mu. `mirostat_generate` runs the loop and keeps the trajectory.

    >>> run = mirostat_generate(model, tokenizer, prompt, tau=3.0, eta=0.1, seed=0)
    >>> [s.surprise for s in run.steps]          # plot it against tau (labkit.viz.plots.plot_surprise)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.doors import check_tensor
from labkit.core.forward import decode_step, model_device, prefill
from labkit.decoding.config import DEFAULT_CONFIG, OPTION_NAMES, DecodingConfig
from labkit.decoding.request import Prompt, check_generator, check_request
from labkit.decoding.sampling import NEG_INF, sample
from labkit.run_log import record_result

ZIPF_TOKENS = 100  # v1 estimates the Zipf exponent from the 100 most likely tokens (the paper's m)


def surprise_bits(probs: torch.Tensor) -> torch.Tensor:
    """-log2 p, elementwise: how many bits of surprise each outcome carries."""
    check_tensor("probs", probs, "of probabilities (any shape)")
    return -torch.log2(probs)


def mirostat_v2_filter(logits: torch.Tensor, mu: float) -> torch.Tensor:
    """Mask tokens whose surprise -log2 p exceeds mu (the most likely token always stays). [B, V]."""
    probs = logits.softmax(dim=-1)
    remove = surprise_bits(probs) > mu
    remove = remove.scatter(-1, probs.argmax(dim=-1, keepdim=True), False)
    return logits.masked_fill(remove, NEG_INF)


def zipf_exponent(probs: torch.Tensor, m: int = ZIPF_TOKENS) -> float:
    """Least-squares estimate of s in p_i ~ i^-s from the m most likely of probs [V] (paper, eq. 30)."""
    top = probs.topk(min(m, probs.shape[-1])).values.double()
    ranks = torch.arange(1, top.shape[0], dtype=torch.float64)
    t = torch.log((ranks + 1) / ranks)  # log((i+2)/(i+1)) for i = 0..m-2
    b = torch.log(top[:-1] / top[1:])
    keep = torch.isfinite(b)
    t, b = t[keep], b[keep]
    return float((t * b).sum() / (t * t).sum()) if t.numel() else 1.0


def mirostat_v1_k(probs: torch.Tensor, mu: float) -> int:
    """The top-k that gives an expected surprise of mu under a Zipf fit of probs [V] (Algorithm 1)."""
    s = zipf_exponent(probs)
    e = s - 1
    n = probs.shape[-1]
    if abs(e) < 1e-9:
        return n
    k = ((e * 2**mu) / (1 - n ** (-e))) ** (1 / s)
    return int(min(max(round(k), 1), n)) if math.isfinite(k) else n


def mirostat_v1_filter(logits: torch.Tensor, mu: float) -> torch.Tensor:
    """Keep the top-k tokens of each row of logits [B, V], k from `mirostat_v1_k`."""
    out = logits.clone()
    for row in range(logits.shape[0]):
        k = mirostat_v1_k(logits[row].softmax(dim=-1), mu)
        kth = logits[row].topk(k).values[-1]
        out[row] = logits[row].masked_fill(logits[row] < kth, NEG_INF)
    return out


def mirostat_update(mu: float, surprise: float, tau: float, eta: float) -> float:
    """One step of the controller: mu - eta * (surprise - tau)."""
    return mu - eta * (surprise - tau)


@dataclass(frozen=True)
class MirostatStep:
    token_id: int
    surprise: float  # -log2 p of the chosen token, under the truncated, renormalised distribution
    mu: float  # the threshold this step used
    kept: int  # how many tokens the truncation kept


@dataclass
class MirostatRun:
    token_ids: list[int] = field(default_factory=list)
    steps: list[MirostatStep] = field(default_factory=list)
    tau: float = 0.0

    def text(self, tokenizer: PreTrainedTokenizerBase) -> str:
        return tokenizer.decode(self.token_ids, skip_special_tokens=True)

    @property
    def surprises(self) -> list[float]:
        return [s.surprise for s in self.steps]

    @property
    def mean_surprise(self) -> float:
        return sum(self.surprises) / max(1, len(self.steps))


MIROSTAT_OPTIONS = ("max_new_tokens", "seed")  # the DecodingConfig options Mirostat uses


def mirostat_generate(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt: Prompt,
    config: DecodingConfig | None = None,
    *,
    tau: float = 3.0,
    eta: float = 0.1,
    version: int = 2,
    generator: torch.Generator | None = None,
    **options,
) -> MirostatRun:
    """Generate with Mirostat; the run keeps each step's surprise and mu for plotting.

    tau: target surprise in bits (> 0; llama.cpp's default is 5.0); eta: learning rate in (0, 1].
    config / options: max_new_tokens and seed (Mirostat's truncation replaces every other sampling option).
    mu starts at 2 * tau, as in the paper.

        >>> run = mirostat_generate(model, tokenizer, prompt_ids, tau=3.0, seed=0)
        >>> run.mean_surprise    # close to tau after a few steps
    """
    _check_mirostat(tau, eta, version)
    request = check_request(model, tokenizer, prompt, config, options, "mirostat_generate")
    _check_only_mirostat_options(request.config)
    check_generator(generator)
    generator = generator if generator is not None else request.config.generator()
    truncate = mirostat_v2_filter if version == 2 else mirostat_v1_filter
    run, mu = MirostatRun(tau=tau), 2 * tau
    prompt_ids, max_new_tokens = request.prompt_ids, request.config.max_new_tokens
    logits, cache = prefill(
        model,
        torch.tensor([prompt_ids], device=model_device(model)),
        max_length=len(prompt_ids) + max_new_tokens,
    )
    for index in range(max_new_tokens):
        kept_logits = truncate(logits.float().cpu(), mu)
        probs = kept_logits.softmax(dim=-1)
        token = sample(probs, generator)
        token_id = int(token[0])
        surprise = float(surprise_bits(probs[0, token_id]))
        run.steps.append(MirostatStep(token_id, surprise, mu, int(torch.isfinite(kept_logits).sum())))
        run.token_ids.append(token_id)
        mu = mirostat_update(mu, surprise, tau, eta)
        if token_id in request.eos_ids or index == max_new_tokens - 1:
            break
        logits = decode_step(model, token.to(model_device(model)), cache)
    return record_result(run)  # the run log keeps the student's own run (labkit.checks reads it)


def _check_mirostat(tau: float, eta: float, version: int) -> None:
    if not (isinstance(tau, (int, float)) and not isinstance(tau, bool) and 0 < tau < float("inf")):
        raise ValueError(f"tau must be a target surprise in bits > 0, got {tau!r}.")
    if not (isinstance(eta, (int, float)) and not isinstance(eta, bool) and 0 < eta <= 1):
        raise ValueError(f"eta must be a learning rate in (0, 1], got {eta!r}.")
    if not isinstance(version, int) or isinstance(version, bool) or version not in (1, 2):
        raise ValueError(f"version must be 1 or 2, got {version!r}.")


def _check_only_mirostat_options(config: DecodingConfig) -> None:
    """Mirostat's truncation replaces temperature, top-k/p and the rest: refuse options it would ignore."""
    ignored = [
        name
        for name in OPTION_NAMES
        if name not in MIROSTAT_OPTIONS and getattr(config, name) != getattr(DEFAULT_CONFIG, name)
    ]
    if ignored:
        raise ValueError(
            f"mirostat_generate() uses only {', '.join(MIROSTAT_OPTIONS)} of the decoding options; "
            f"{', '.join(ignored)} would have no effect. Use labkit.generate for them."
        )
