"""Tokens and probabilities as the figures write them: readable labels, short percentages, and the most
likely candidates of one next-token distribution.

A token id means nothing to a reader, and a token's text can be a lone space, a newline or a third of an
emoji. So every figure names a token with `token_label` (quoted, so spaces and newlines show; a byte
piece by its id) and passes the label through `drawable` (characters the plot font lacks become escapes,
and '$' is escaped so matplotlib does not start math mode). A distribution may come as probabilities or
as logits: `as_probs` tells them apart, and `top_candidates` reads its head.

    >>> top_candidates(step.logits, tokenizer, top_k=3)[0].label
    "' Paris'"
    >>> percent(0.152), percent(0.0004)
    ('15.2%', '<0.1%')
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import matplotlib.pyplot as plt
import torch
from matplotlib import font_manager, ft2font
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.text import INCOMPLETE_CHARACTER
from labkit.decoding.request import Step


@dataclass(frozen=True)
class TokenCandidate:
    """One possible next token and its probability."""

    token_id: int  # id in the vocabulary
    label: str  # readable form of the token, e.g. "' Paris'"
    prob: float  # probability in [0, 1]


def as_probs(probs_or_logits: torch.Tensor) -> torch.Tensor:
    """[V] or [1, V] probabilities or logits -> [V] float32 probabilities.

    Values that are all in [0, 1] and sum to 1 are taken as probabilities; anything else as logits,
    which go through a softmax.

        >>> as_probs(torch.tensor([0.0, 0.0])).tolist()
        [0.5, 0.5]
    """
    if probs_or_logits.dim() == 2 and probs_or_logits.shape[0] == 1:
        probs_or_logits = probs_or_logits[0]
    if probs_or_logits.dim() != 1:
        raise ValueError(
            f"Expected one distribution of shape [V] (or [1, V]), got shape {tuple(probs_or_logits.shape)}. "
            "For a forward pass's logits [1, T, V], take the last position: logits[0, -1]."
        )
    values = probs_or_logits.detach().float().cpu()
    is_probs = bool(values.min() >= 0) and bool(values.max() <= 1) and abs(float(values.sum()) - 1) < 1e-3
    return values if is_probs else torch.softmax(values, dim=-1)


@lru_cache(maxsize=1)
def _font_charmap() -> frozenset[int]:
    """Code points the default matplotlib font can draw (others would print 'Glyph missing' warnings)."""
    path = font_manager.findfont(font_manager.FontProperties(family=plt.rcParams["font.family"]))
    return frozenset(ft2font.FT2Font(path).get_charmap())


def step_logits(step: Step) -> torch.Tensor:
    """The logits [V] a step was chosen from; a clear error when the stream was made without them."""
    if step.logits is None:
        raise ValueError(
            "This Step carries no logits: generate with return_logits=True to draw distributions, "
            "e.g. labkit.generate(model, tokenizer, prompt, return_logits=True)."
        )
    return step.logits


def token_label(tokenizer: PreTrainedTokenizerBase, token_id: int) -> str:
    """A token as a short, unambiguous label: quoted, so leading spaces and newlines show.

    A byte-piece of a multi-byte character (a third of an emoji) has no text of its own, so it is
    shown by id.

        >>> token_label(tokenizer, 7042)
        "' Paris'"
    """
    text = tokenizer.decode([int(token_id)], skip_special_tokens=False)
    if INCOMPLETE_CHARACTER in text:
        return f"#{int(token_id)} (byte piece)"
    return repr(text)


def drawable(label: str) -> str:
    """A label matplotlib can draw as is: characters the font lacks (emoji) become escapes, and '$'
    (which would start math mode) is escaped."""
    charmap = _font_charmap()
    label = "".join(c if ord(c) in charmap else c.encode("unicode_escape").decode() for c in label)
    return label.replace("$", r"\$")


def percent(prob: float) -> str:
    """A probability as a short percentage: '15.2%', or '<0.1%' for the long tail."""
    return f"{prob:.1%}" if prob >= 0.001 else "<0.1%"


def top_candidates(
    probs_or_logits: torch.Tensor, tokenizer: PreTrainedTokenizerBase, top_k: int = 10
) -> list[TokenCandidate]:
    """The top_k most likely next tokens of one distribution [V], most likely first.

    >>> top_candidates(step.logits, tokenizer, top_k=3)[0].label
    "' Paris'"
    """
    check_int("top_k", top_k, minimum=1)
    probs = as_probs(probs_or_logits)
    values, ids = probs.topk(min(top_k, probs.shape[0]))
    return [TokenCandidate(int(i), token_label(tokenizer, int(i)), float(p)) for p, i in zip(values, ids)]
