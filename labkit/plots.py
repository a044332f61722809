"""Matplotlib figures for the course: what the model considers at each step of generation.

Every function takes plain tensors or the `Step`s that `labkit.generate` yields and returns the
matplotlib Axes or Figure it drew on; pass `ax=` to draw into a figure of your own.

    >>> probs = torch.softmax(model(input_ids).logits[0, -1], dim=-1)      # [V]
    >>> plot_next_token_distribution(probs, tokenizer, top_k=10, chosen=int(probs.argmax()))
    >>> plt.show()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import matplotlib.pyplot as plt
import torch
from matplotlib import font_manager, ft2font
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from transformers import PreTrainedTokenizerBase

from labkit.generate import Step
from labkit.streaming import INCOMPLETE_CHARACTER

CHOSEN_COLOR = "tab:orange"  # the token that was picked
OTHER_COLOR = "tab:blue"  # the candidates that were not


@dataclass(frozen=True)
class Candidate:
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


def top_candidates(probs_or_logits: torch.Tensor, tokenizer: PreTrainedTokenizerBase,
                   top_k: int = 10) -> list[Candidate]:
    """The top_k most likely next tokens of one distribution [V], most likely first.

        >>> top_candidates(step.logits, tokenizer, top_k=3)[0].label
        "' Paris'"
    """
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}.")
    probs = as_probs(probs_or_logits)
    values, ids = probs.topk(min(top_k, probs.shape[0]))
    return [Candidate(int(i), token_label(tokenizer, int(i)), float(p)) for p, i in zip(values, ids)]


def plot_next_token_distribution(
    probs_or_logits: torch.Tensor,
    tokenizer: PreTrainedTokenizerBase,
    top_k: int = 10,
    chosen: int | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Horizontal bars of the top_k next-token candidates [V], most likely on top.

    chosen: a token id to highlight (in orange). If it is not among the top_k, it gets its own bar
    at the bottom, so a sampled long-shot is still visible.

        >>> probs = torch.softmax(logits[0, -1], dim=-1)              # logits [1, T, V]
        >>> ax = plot_next_token_distribution(probs, tokenizer, chosen=int(probs.argmax()))
    """
    probs = as_probs(probs_or_logits)
    chosen = None if chosen is None else int(chosen)
    if chosen is not None and not 0 <= chosen < probs.shape[0]:
        raise ValueError(f"chosen must be a token id in [0, {probs.shape[0]}), got {chosen}.")
    candidates = top_candidates(probs, tokenizer, top_k)
    if chosen is not None and all(c.token_id != chosen for c in candidates):
        candidates.append(Candidate(chosen, token_label(tokenizer, chosen), float(probs[chosen])))
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 0.3 * len(candidates) + 1.0), layout="constrained")
    rows = range(len(candidates))[::-1]  # the first candidate drawn at the top
    colors = [CHOSEN_COLOR if c.token_id == chosen else OTHER_COLOR for c in candidates]
    bars = ax.barh(list(rows), [c.prob for c in candidates], color=colors)
    ax.set_yticks(list(rows), [drawable(c.label) for c in candidates])
    ax.bar_label(bars, labels=[percent(c.prob) for c in candidates], padding=3, fontsize=8)
    for tick, color in zip(ax.get_yticklabels(), colors):
        if color == CHOSEN_COLOR:  # the label too, since a long-shot's bar may be too thin to see
            tick.set_color(CHOSEN_COLOR)
            tick.set_fontweight("bold")
    ax.set_xlim(0, min(1.0, max(c.prob for c in candidates) * 1.25 + 0.02))
    ax.set_xlabel("probability")
    ax.spines[["top", "right"]].set_visible(False)
    if title is not None:
        ax.set_title(drawable(title))
    return ax


def plot_generation_steps(
    steps: Sequence[Step],
    tokenizer: PreTrainedTokenizerBase,
    top_k: int = 5,
    max_steps: int = 6,
    n_cols: int = 3,
) -> Figure:
    """A grid of small bar charts: the top_k candidates at each of the first max_steps steps.

    The static picture of `labkit.widgets.generation_stepper`, for where no slider can move.

        >>> steps = list(labkit.generate(model, tokenizer, prompt, max_new_tokens=8))
        >>> fig = plot_generation_steps(steps, tokenizer)
    """
    if not steps:
        raise ValueError("No steps to plot: the generation produced no tokens.")
    shown = list(steps)[:max_steps]
    n_rows = -(-len(shown) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.2 * n_cols, (0.25 * top_k + 1.1) * n_rows),
                             squeeze=False, layout="constrained")
    for index, (ax, step) in enumerate(zip(axes.flat, shown)):
        plot_next_token_distribution(step.logits, tokenizer, top_k=top_k, chosen=step.token_id, ax=ax,
                                     title=f"step {index + 1}: {token_label(tokenizer, step.token_id)}")
        ax.set_xlabel("")
    for ax in list(axes.flat)[len(shown):]:
        ax.set_visible(False)
    return fig


def plot_step_confidence(steps: Sequence[Step], tokenizer: PreTrainedTokenizerBase,
                         ax: Axes | None = None) -> Axes:
    """One bar per generated token: the probability it had when chosen, and the runner-up's.

    Low bars are where the model hesitated, the places where sampling could take another road.

        >>> ax = plot_step_confidence(steps, tokenizer)
    """
    if not steps:
        raise ValueError("No steps to plot: the generation produced no tokens.")
    chosen, runner_up = [], []
    for step in steps:
        probs = as_probs(step.logits)
        chosen.append(float(probs[step.token_id]))
        others = probs.clone()
        others[step.token_id] = 0
        runner_up.append(float(others.max()))
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(steps)), 3.2), layout="constrained")
    positions = range(len(steps))
    ax.bar([p - 0.2 for p in positions], chosen, width=0.4, color=CHOSEN_COLOR, label="chosen token")
    ax.bar([p + 0.2 for p in positions], runner_up, width=0.4, color=OTHER_COLOR, alpha=0.5,
           label="best other token")
    ax.set_xticks(list(positions), [drawable(token_label(tokenizer, s.token_id)) for s in steps], rotation=60,
                  ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("probability")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return ax
