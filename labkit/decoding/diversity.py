"""How varied and how repetitive generated text is (notebooks 04-05).

>>> distinct_n(["a b a b", "a b c"], n=2)
0.6
>>> greedy_repetition(model, tokenizer, labkit.chat_prompt(tokenizer, "Hi!"))
GreedyRepetition(repeated_4grams=0.0, mean_entropy=1.2, ended=True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from labkit.core.arguments import check_int
from labkit.core.doors import check_items, check_model
from labkit.decoding.generate import generate


def distinct_n(texts: Sequence[str], n: int = 2) -> float:
    """Distinct-n (Li et al. 2016): unique word n-grams / all word n-grams, pooled over texts, in [0, 1].

    1 means no n-gram is ever repeated; near 0, the same phrases over and over.

        >>> distinct_n(["a b a b", "a b c"], n=2)
        0.6
    """
    check_items("texts", texts, "texts (str)", of=str)
    check_int("n", n, minimum=1)
    grams = [
        tuple(words[i : i + n])
        for text in texts
        for words in [text.split()]
        for i in range(len(words) - n + 1)
    ]
    return len(set(grams)) / len(grams) if grams else 0.0


def repeated_ngram_fraction(token_ids: Sequence[int], n: int = 4) -> float:
    """The fraction of a sequence's token n-grams that already occurred earlier in it, in [0, 1].

    A model stuck in a loop scores near 1.

        >>> repeated_ngram_fraction([1, 2, 1, 2, 1, 2], n=2)
        0.6
    """
    check_items("token_ids", token_ids, "token ids (int)", of=int)
    check_int("n", n, minimum=1)
    seen, repeats, total = set(), 0, 0
    for i in range(len(token_ids) - n + 1):
        gram = tuple(token_ids[i : i + n])
        repeats += gram in seen
        total += 1
        seen.add(gram)
    return repeats / total if total else 0.0


class GreedyRepetition(NamedTuple):
    """How one greedy continuation behaved."""

    repeated_4grams: float  # repeated_ngram_fraction of its token ids, n = 4
    mean_entropy: float  # mean entropy of the next-token distributions, in nats
    ended: bool  # True if the model ended it (EOS) before the length limit


def greedy_repetition(
    model: torch.nn.Module, tokenizer, prompt_ids: Sequence[int], max_new_tokens: int = 48
) -> GreedyRepetition:
    """Greedy-decode `prompt_ids` and measure how repetitive and how sure the continuation is
    (notebook 05's "do modern models still need creative decoding?")."""
    check_model("model", model)
    steps = list(generate(model, tokenizer, prompt_ids, max_new_tokens=max_new_tokens, return_logits=True))
    entropies = [float(-(s.logits.softmax(-1) * s.logits.log_softmax(-1)).nansum()) for s in steps]
    return GreedyRepetition(
        repeated_ngram_fraction([s.token_id for s in steps], 4),
        sum(entropies) / len(entropies),
        steps[-1].finish_reason == "eos",
    )
