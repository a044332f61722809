"""Minimum Bayes risk (MBR) decoding: sample N candidates, keep the one the others agree with most.

The mode of a model's distribution is often not its best text; MBR picks the candidate with the
highest *expected similarity* to what the model would say, estimating the expectation with the
samples themselves (Kumar & Byrne 2004; Eikema & Aziz 2020):

    best = argmax_i  1/(N-1) * sum_{j != i} similarity(candidate_i, candidate_j)

Similarity: chrF (Popovic 2015), the character n-gram F-score that sacrebleu reports, here
re-implemented in a few lines (n = 1..6, beta = 2, whitespace ignored); or token-F1 (SQuAD's word
overlap F1). Both are in [0, 100] and [0, 1] respectively; higher means more alike.

    >>> result = mbr_decode(model, tokenizer, prompt_ids, n_samples=8, seed=0, temperature=0.8)
    >>> result.best, result.expected_similarity
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.doors import check_number
from labkit.decoding.config import DecodingConfig
from labkit.decoding.generate import generate_text
from labkit.decoding.request import Prompt, check_request

CHRF_ORDER = 6  # character n-grams of length 1..6 (sacrebleu's default)
CHRF_BETA = 2.0  # recall counts twice as much as precision (sacrebleu's default)


def _char_ngrams(text: str, n: int) -> Counter:
    text = "".join(text.split())  # chrF ignores whitespace
    return Counter(text[i : i + n] for i in range(len(text) - n + 1))


def chrf(hypothesis: str, reference: str, order: int = CHRF_ORDER, beta: float = CHRF_BETA) -> float:
    """chrF in [0, 100]: the F-beta of character n-gram precision and recall, averaged over n = 1..order.

    Precision and recall are averaged over the n-gram orders that occur (as sacrebleu does), then
    combined: F = (1 + beta^2) P R / (beta^2 P + R).

        >>> chrf("the cat sat", "the cat sat")
        100.0
    """
    for name, text in (("hypothesis", hypothesis), ("reference", reference)):
        if not isinstance(text, str):
            raise TypeError(
                f"{name} must be a string to compare by character n-grams, got {type(text).__name__}."
            )
    check_int("order", order, minimum=1)
    check_number("beta", beta, above=0)
    precisions, recalls = [], []
    for n in range(1, order + 1):
        hyp, ref = _char_ngrams(hypothesis, n), _char_ngrams(reference, n)
        if not hyp or not ref:
            continue
        overlap = sum((hyp & ref).values())
        precisions.append(overlap / sum(hyp.values()))
        recalls.append(overlap / sum(ref.values()))
    if not precisions:
        return 100.0 if "".join(hypothesis.split()) == "".join(reference.split()) else 0.0
    p, r = sum(precisions) / len(precisions), sum(recalls) / len(recalls)
    if p == 0 and r == 0:
        return 0.0
    return 100 * (1 + beta**2) * p * r / (beta**2 * p + r)


def token_f1(hypothesis: str, reference: str) -> float:
    """Word-overlap F1 in [0, 1] on lower-cased whitespace tokens (SQuAD's metric, without its
    punctuation and article stripping).

        >>> token_f1("a red car", "the red car")
        0.6666666666666666
    """
    hyp, ref = hypothesis.lower().split(), reference.lower().split()
    if not hyp or not ref:
        return float(hyp == ref)
    overlap = sum((Counter(hyp) & Counter(ref)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(hyp), overlap / len(ref)
    return 2 * precision * recall / (precision + recall)


SIMILARITIES: dict[str, Callable[[str, str], float]] = {"chrf": chrf, "token_f1": token_f1}


def mbr_select(
    candidates: Sequence[str], similarity: str | Callable[[str, str], float] = "chrf"
) -> tuple[int, list[float]]:
    """(index of the MBR choice, expected similarity of every candidate to the others).

    Ties go to the earliest candidate.

        >>> mbr_select(["Paris.", "Paris", "Lyon"])[0]
        0
    """
    if len(candidates) < 2:
        raise ValueError(f"MBR needs at least 2 candidates to compare, got {len(candidates)}.")
    measure = SIMILARITIES.get(similarity) if isinstance(similarity, str) else similarity
    if measure is None:
        raise ValueError(
            f"Unknown similarity {similarity!r}; choose one of: {', '.join(SIMILARITIES)}, "
            "or pass a function (hypothesis, reference) -> float."
        )
    n = len(candidates)
    expected = [
        sum(measure(candidates[i], candidates[j]) for j in range(n) if j != i) / (n - 1) for i in range(n)
    ]
    best = max(range(n), key=lambda i: (expected[i], -i))
    return best, expected


@dataclass(frozen=True)
class MbrResult:
    best: str  # the chosen candidate
    index: int  # its position in candidates
    candidates: list[str]  # the N samples
    expected_similarity: list[float]  # each candidate's mean similarity to the others


MBR_DEFAULTS = {"temperature": 1.0, "max_new_tokens": 48, "seed": 0}  # when no config is given


def mbr_decode(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt: Prompt,
    config: DecodingConfig | None = None,
    *,
    n_samples: int = 8,
    similarity: str = "chrf",
    **options,
) -> MbrResult:
    """Sample n_samples continuations (seeds seed, seed+1, ...) and return the MBR choice.

    config / options: how to sample (a DecodingConfig, or its options by name; default temperature=1.0,
    max_new_tokens=48, seed=0). A config without a seed draws a fresh one.

        >>> mbr_decode(model, tokenizer, labkit.chat_prompt(tokenizer, "Name a fruit."), n_samples=8)
    """
    check_int("n_samples", n_samples, minimum=2)
    if not (callable(similarity) or similarity in SIMILARITIES):
        raise ValueError(
            f"Unknown similarity {similarity!r}; choose one of: {', '.join(SIMILARITIES)}, "
            "or pass a function (hypothesis, reference) -> float."
        )
    request = check_request(model, tokenizer, prompt, config, options, "mbr_decode", MBR_DEFAULTS)
    config = request.config
    if not config.do_sample:
        raise ValueError("MBR compares samples: use temperature > 0.")
    seed = config.seed if config.seed is not None else int(torch.seed() % 2**31)
    candidates = [
        generate_text(model, tokenizer, request.prompt_ids, config.replace(seed=seed + i)).strip()
        for i in range(n_samples)
    ]
    index, expected = mbr_select(candidates, similarity)
    return MbrResult(candidates[index], index, candidates, expected)
