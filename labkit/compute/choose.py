"""Choosing one answer among n samples: four ways to turn more samples into (maybe) more right answers.

Draw n answers to the same question at temperature > 0, then keep one (notebook 14):
- **self-consistency** (Wang et al. 2023): read the answer out of each sample, normalized so that "55",
  " 55." and "It is 55" agree, and keep the most common one: a majority vote;
- **best-of-n by log-probability**: keep the sample the model itself found most likely per token (the
  mean of its tokens' raw log-probabilities, so a short answer is not favoured for being short);
- **MBR** (notebook 05, `labkit.decoding.mbr`): keep the sample most similar (chrF) to the others, a soft
  vote over the whole text rather than the answer alone;
- **pass@n with an oracle verifier**: right if *any* of the n samples is right. No method that only looks
  at the samples can beat it: it is the ceiling that a perfect checker (unit tests, a proof checker, the
  task's `is_correct`) would reach, and where it stays low, no vote can help.

Each chooser is a function of the samples alone (`CHOOSERS`); the oracle also reads the item's answer.

    >>> samples = [Sample("55", "55", 2, -0.9), Sample(" 54.", "54", 3, -0.4), Sample("It is 55", "55", 4, -1.2)]
    >>> self_consistency(samples), best_of_n(samples), mbr_choice(samples), oracle(samples, "54")
    ('55', '54', '55', '54')
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from labkit.core.arguments import check_int
from labkit.decoding.mbr import mbr_select


@dataclass(frozen=True)
class Sample:
    """One generated answer to one item."""

    text: str  # what the model wrote
    answer: str | None  # the answer read out of it, normalized (verifiable.extract_answer); None if none
    n_tokens: int  # tokens generated
    mean_logprob: float  # mean raw log-probability of its tokens (nan when none were generated)


Chooser = Callable[[Sequence[Sample]], "str | None"]


def check_samples(samples: object) -> Sequence[Sample]:
    """samples, if it is a non-empty list of Sample; else a TypeError or ValueError naming it."""
    if isinstance(samples, Sample) or not isinstance(samples, Sequence):
        raise TypeError(
            f"samples must be a list of Sample (one item's answers), got {type(samples).__name__}."
        )
    if not samples or not all(isinstance(sample, Sample) for sample in samples):
        raise ValueError("samples must hold at least one Sample, and only Samples.")
    return samples


def self_consistency(samples: Sequence[Sample]) -> str | None:
    """The most common answer among the samples (a tie: the one that came first); samples without an
    answer do not vote; None when none has one.

        >>> self_consistency([Sample("54", "54", 1, -1.0), Sample("55", "55", 1, -2.0), Sample("55.", "55", 2, -2.0)])
        '55'
    """
    votes = Counter(sample.answer for sample in check_samples(samples) if sample.answer is not None)
    return max(votes, key=votes.__getitem__) if votes else None  # max keeps the first of equal counts


def best_of_n(samples: Sequence[Sample]) -> str | None:
    """The answer of the sample with the highest mean log-probability per token (ties: the first).

    >>> best_of_n([Sample("54", "54", 1, -1.0), Sample("55", "55", 1, -0.2)])
    '55'
    """
    scored = [sample for sample in check_samples(samples) if not math.isnan(sample.mean_logprob)]
    return max(scored, key=lambda sample: sample.mean_logprob).answer if scored else samples[0].answer


def mbr_choice(samples: Sequence[Sample], similarity: str = "chrf") -> str | None:
    """The answer of the sample whose text is most like the others' (notebook 05's mbr_select, chrF by
    default); one sample is its own choice.

        >>> mbr_choice([Sample("55", "55", 1, -1.0), Sample("55.", "55", 2, -1.0), Sample("7", "7", 1, -1.0)])
        '55'
    """
    if len(check_samples(samples)) == 1:
        return samples[0].answer
    index, _ = mbr_select([sample.text.strip() for sample in samples], similarity)
    return samples[index].answer


def oracle(samples: Sequence[Sample], answer: str) -> str | None:
    """pass@n's choice: `answer` (the right one) if any sample gives it, else the first sample's answer.

    >>> oracle([Sample("54", "54", 1, -1.0), Sample("55", "55", 1, -2.0)], "55")
    '55'
    """
    if not isinstance(answer, str):
        raise TypeError(f"answer must be the item's right answer as a string, got {type(answer).__name__}.")
    given = [sample.answer for sample in check_samples(samples)]
    return answer if answer in given else given[0]


CHOOSERS: dict[str, Chooser] = {
    "self-consistency": self_consistency,
    "best-of-n (log-prob)": best_of_n,
    "MBR (chrF)": mbr_choice,
}
ORACLE = "pass@n (oracle)"


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from n samples of which c are right (Chen et al. 2021, eq. 1):
    the chance that k samples drawn from the n without replacement hold at least one right one,
    1 - C(n - c, k) / C(n, k). Averaged over items it has less variance than scoring the first k alone.

        >>> pass_at_k(16, 2, 1), round(pass_at_k(16, 2, 8), 3), pass_at_k(16, 0, 16)
        (0.125, 0.767, 0.0)
    """
    check_int("n", n, minimum=1, note="samples drawn")
    check_int("c", c, minimum=0, maximum=n, note="right samples, at most n")
    check_int("k", k, minimum=1, maximum=n, note="samples chosen, at most n")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
