"""Matplotlib figures for the course: what the model considers at each step of generation.

Every function takes plain tensors or the `Step`s that `labkit.generate` yields and returns the
matplotlib Axes or Figure it drew on; pass `ax=` to draw into a figure of your own. The labels they
write (a token quoted, a percentage) come from labkit.viz.tokens; what a sampling rule keeps and cuts,
and Mirostat's surprise, are drawn by labkit.viz.sampling (both still importable from here).

    >>> probs = torch.softmax(model(input_ids).logits[0, -1], dim=-1)      # [V]
    >>> plot_next_token_distribution(probs, tokenizer, top_k=10, chosen=int(probs.argmax()))
    >>> plt.show()
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from transformers import PreTrainedTokenizerBase

from labkit.core.doors import check_items, check_tensor
from labkit.decoding.request import Step
from labkit.viz.alt import with_alt_text
from labkit.viz.sampling import CUT_COLOR, KEPT_COLOR, RENORMALIZED_COLOR, plot_kept_vs_cut, plot_surprise
from labkit.viz.tokens import (
    TokenCandidate,
    as_probs,
    drawable,
    percent,
    step_logits,
    token_label,
    top_candidates,
)

CHOSEN_COLOR = "tab:orange"  # the token that was picked
OTHER_COLOR = "tab:blue"  # the candidates that were not
REST_COLOR = "tab:gray"  # the bar that holds the mass of every token not drawn on its own
REST_ID = -1  # the token id of that bar (no real token has it)

__all__ = [  # this module's figures, and the names notebooks and tests reach through it (defined beside it)
    "CHOSEN_COLOR",
    "CUT_COLOR",
    "KEPT_COLOR",
    "OTHER_COLOR",
    "RENORMALIZED_COLOR",
    "REST_COLOR",
    "REST_ID",
    "TokenCandidate",
    "as_probs",
    "drawable",
    "percent",
    "plot_generation_steps",
    "plot_kept_vs_cut",
    "plot_next_token_distribution",
    "plot_step_confidence",
    "plot_surprise",
    "step_logits",
    "token_label",
    "top_candidates",
]


def candidates_to_draw(
    probs: torch.Tensor,
    tokenizer: PreTrainedTokenizerBase,
    top_k: int,
    chosen: int | None,
    tokens: list[int] | None,
) -> list[TokenCandidate]:
    """The bars of `plot_next_token_distribution`, top to bottom, for probabilities [V]: the top_k candidates
    (or the given `tokens`, in order, then a bar "every other token" for the rest of the mass), and the
    `chosen` token at the bottom when it is not among them.

        >>> [c.label for c in candidates_to_draw(probs, tokenizer, 10, None, tokens=[7042])]
        ["' Paris'", 'every other token']
    """
    candidates = (
        top_candidates(probs, tokenizer, top_k)
        if tokens is None
        else [TokenCandidate(t, token_label(tokenizer, t), float(probs[t])) for t in tokens]
    )
    if chosen is not None and all(c.token_id != chosen for c in candidates):
        candidates.append(TokenCandidate(chosen, token_label(tokenizer, chosen), float(probs[chosen])))
    if tokens is not None:  # the rest of the mass, so both panels of a comparison sum to 1
        rest = max(0.0, 1.0 - sum(c.prob for c in candidates))
        candidates.append(TokenCandidate(REST_ID, "every other token", rest))
    return candidates


def add_candidate_bars(ax: Axes, candidates: Sequence[TokenCandidate], chosen: int | None) -> None:
    """One horizontal bar per candidate, the first on top, each labelled with its percentage; the chosen
    token's bar and name in orange (bold), the rest-of-the-mass bar in grey.

        >>> add_candidate_bars(ax, top_candidates(probs, tokenizer, 5), chosen=int(probs.argmax()))
    """
    rows = range(len(candidates))[::-1]  # the first candidate drawn at the top
    colors = [
        CHOSEN_COLOR if c.token_id == chosen else REST_COLOR if c.token_id == REST_ID else OTHER_COLOR
        for c in candidates
    ]
    bars = ax.barh(list(rows), [c.prob for c in candidates], color=colors)
    ax.set_yticks(list(rows), [drawable(c.label) for c in candidates])
    ax.bar_label(bars, labels=[percent(c.prob) for c in candidates], padding=3, fontsize=8)
    for tick, color in zip(ax.get_yticklabels(), colors):
        if color == CHOSEN_COLOR:  # the label too, since a long-shot's bar may be too thin to see
            tick.set_color(CHOSEN_COLOR)
            tick.set_fontweight("bold")
    ax.set_xlim(0, min(1.0, max(c.prob for c in candidates) * 1.25 + 0.02))


@with_alt_text("Bar chart of the most likely next tokens and their probabilities, most likely first")
def plot_next_token_distribution(
    probs_or_logits: torch.Tensor,
    tokenizer: PreTrainedTokenizerBase,
    top_k: int = 10,
    chosen: int | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    tokens: Sequence[int] | None = None,
) -> Axes:
    """Horizontal bars of the top_k next-token candidates [V], most likely on top.

    chosen: a token id to highlight (in orange). If it is not among the top_k, it gets its own bar
    at the bottom, so a sampled long-shot is still visible.
    tokens: bars for these token ids, in this order, instead of the top_k, and a grey bar "every other
    token" for the rest of the mass: two distributions drawn with the same `tokens` compare bar by bar.

        >>> probs = torch.softmax(logits[0, -1], dim=-1)              # logits [1, T, V]
        >>> ax = plot_next_token_distribution(probs, tokenizer, chosen=int(probs.argmax()))
        >>> ax = plot_next_token_distribution(frequencies, tokenizer, tokens=probs.topk(6).indices.tolist())
    """
    check_tensor(
        "probs_or_logits",
        probs_or_logits,
        "[V] (or [1, V]) of one position's probabilities or logits",
        dims=(1, 2),
    )
    probs = as_probs(probs_or_logits)
    chosen = None if chosen is None else int(chosen)
    if chosen is not None and not 0 <= chosen < probs.shape[0]:
        raise ValueError(f"chosen must be a token id in [0, {probs.shape[0]}), got {chosen}.")
    if tokens is not None:
        tokens = [int(t) for t in tokens]
        if not tokens or len(set(tokens)) != len(tokens) or not all(0 <= t < probs.shape[0] for t in tokens):
            raise ValueError(
                f"tokens must be distinct token ids in [0, {probs.shape[0]}), at least one; got {tokens}."
            )
    candidates = candidates_to_draw(probs, tokenizer, top_k, chosen, tokens)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 0.3 * len(candidates) + 1.0), layout="constrained")
    add_candidate_bars(ax, candidates, chosen)
    ax.set_xlabel("probability")
    ax.spines[["top", "right"]].set_visible(False)
    if title is not None:
        ax.set_title(drawable(title))
    return ax


@with_alt_text("Grid of bar charts: the most likely candidates at each of the first generation steps")
def plot_generation_steps(
    steps: Sequence[Step],
    tokenizer: PreTrainedTokenizerBase,
    top_k: int = 5,
    max_steps: int = 6,
    n_cols: int = 3,
) -> Figure:
    """A grid of small bar charts: the top_k candidates at each of the first max_steps steps.

    The static picture of `labkit.viz.widgets.generation_stepper`, for where no slider can move.

        >>> steps = list(labkit.generate(model, tokenizer, prompt, max_new_tokens=8))
        >>> fig = plot_generation_steps(steps, tokenizer)
    """
    steps = check_items("steps", steps, "Step (from labkit.generate)", has=("token_id", "logits"))
    if not steps:
        raise ValueError("No steps to plot: the generation produced no tokens.")
    shown = list(steps)[:max_steps]
    n_rows = -(-len(shown) // n_cols)
    fig, axes = plt.subplots(
        n_rows,
        n_cols,
        figsize=(4.2 * n_cols, (0.25 * top_k + 1.1) * n_rows),
        squeeze=False,
        layout="constrained",
    )
    for index, (ax, step) in enumerate(zip(axes.flat, shown)):
        plot_next_token_distribution(
            step_logits(step),
            tokenizer,
            top_k=top_k,
            chosen=step.token_id,
            ax=ax,
            title=f"step {index + 1}: {token_label(tokenizer, step.token_id)}",
        )
        ax.set_xlabel("")
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_visible(False)
    return fig


@with_alt_text("Bar chart of each generated token's probability when chosen, beside the runner-up's")
def plot_step_confidence(
    steps: Sequence[Step], tokenizer: PreTrainedTokenizerBase, ax: Axes | None = None
) -> Axes:
    """One bar per generated token: the probability it had when chosen, and the runner-up's.

    Low bars are where the model hesitated, the places where sampling could take another road.

        >>> ax = plot_step_confidence(steps, tokenizer)
    """
    steps = check_items("steps", steps, "Step (from labkit.generate)", has=("token_id", "logits"))
    if not steps:
        raise ValueError("No steps to plot: the generation produced no tokens.")
    chosen, runner_up = [], []
    for step in steps:
        probs = as_probs(step_logits(step))
        chosen.append(float(probs[step.token_id]))
        others = probs.clone()
        others[step.token_id] = 0
        runner_up.append(float(others.max()))
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(steps)), 3.2), layout="constrained")
    positions = range(len(steps))
    ax.bar([p - 0.2 for p in positions], chosen, width=0.4, color=CHOSEN_COLOR, label="chosen token")
    ax.bar(
        [p + 0.2 for p in positions],
        runner_up,
        width=0.4,
        color=OTHER_COLOR,
        alpha=0.5,
        label="best other token",
    )
    ax.set_xticks(
        list(positions),
        [drawable(token_label(tokenizer, s.token_id)) for s in steps],
        rotation=60,
        ha="right",
        fontsize=8,
    )
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("probability")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return ax
