"""Figures for search (notebook 03): the beam tree (`plot_beam_tree`), annotated where beam search leaves greedy's path.

>>> split = first_divergence(model, prompt_ids, greedy.token_ids, result.best.token_ids)
>>> plot_beam_vs_greedy(result, tokenizer, greedy.token_ids, split)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from transformers import PreTrainedTokenizerBase

from labkit.core.doors import check_record
from labkit.decoding.exact import Divergence
from labkit.decoding.search import BeamSearchResult
from labkit.viz.alt import with_alt_text
from labkit.viz.palette import BLUISH_GREEN, VERMILLION
from labkit.viz.sampling import KEPT_COLOR
from labkit.viz.tokens import drawable, token_label

GREEDY_COLOR = VERMILLION  # greedy's path (dashed), told from finished beams (green) by more than hue
BEAM_COLOR = "tab:orange"  # the token beam search keeps where the paths part


STATUS_COLORS = {"running": KEPT_COLOR, "finished": BLUISH_GREEN, "pruned": "gray"}  # a candidate's fate
LABEL_WIDTH = 12  # characters of a token's label in the tree; longer ones are cut with an ellipsis


def short_label(tokenizer: PreTrainedTokenizerBase, token_id: int) -> str:
    """A token's label cut to LABEL_WIDTH characters, so neighbouring columns do not overlap.

    >>> short_label(tokenizer, 7042)
    "' Paris'"
    """
    label = drawable(token_label(tokenizer, token_id))
    return label[: LABEL_WIDTH - 1] + "…" if len(label) > LABEL_WIDTH else label


def add_tree_node(ax: Axes, t: int, parent_y: float, y: float, text: str, status: str, on_best: bool) -> None:
    """One candidate of step t: the edge from its parent (column t - 1, height parent_y) to (t, y), its dot
    and its text, coloured by its status; thick and bold on the best hypothesis's path, faint when pruned.

        >>> add_tree_node(ax, 1, 1.0, 2.0, "' Paris' -0.4", "running", on_best=True)
    """
    color = STATUS_COLORS[status]
    ax.plot(
        [t - 1, t],
        [parent_y, y],
        color=color,
        lw=3 if on_best else 0.8,
        alpha=0.35 if status == "pruned" else 0.9,
        zorder=1,
    )
    ax.scatter([t], [y], color=color, s=18, zorder=2)
    ax.text(
        t + 0.05,
        y + 0.12,
        text,
        fontsize=7,
        color="black" if status != "pruned" else "gray",
        fontweight="bold" if on_best else "normal",
    )


def label_tree_axes(ax: Axes, n_steps: int) -> None:
    """A column per step after the prompt's, no y axis, a legend of the statuses and the title."""
    ax.set_xticks(range(n_steps + 1), ["prompt"] + [f"step {t}" for t in range(1, n_steps + 1)], fontsize=8)
    ax.set_yticks([])
    ax.set_xlim(-0.3, n_steps + 0.9)
    ax.spines[["top", "right", "left"]].set_visible(False)
    handles = [plt.Line2D([], [], color=c, marker="o", lw=1, label=s) for s, c in STATUS_COLORS.items()]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_title("beam search: every candidate, with its summed log-probability", fontsize=10)


@with_alt_text(
    "Tree of beam search: one column per step, each candidate with its summed log-probability, kept, "
    "finished or pruned"
)
def plot_beam_tree(
    result, tokenizer: PreTrainedTokenizerBase, ax: Axes | None = None, show_pruned: bool = True
) -> Axes:
    """Beam search as a tree (`labkit.search.beam_search`'s result): one column per step, every
    candidate looked at, with its summed log-probability. Blue: kept as a beam; green: finished
    (EOS or length); grey: pruned. The best hypothesis's path is drawn thick.

        >>> plot_beam_tree(beam_search(model, tokenizer, prompt_ids, num_beams=3, max_new_tokens=6), tokenizer)
    """
    steps = result.steps
    if not steps:
        raise ValueError("No steps to draw: the search generated nothing.")
    n_rows = max(len(step) for step in steps)
    if ax is None:
        _, ax = plt.subplots(figsize=(2.1 * len(steps) + 1.5, 0.55 * n_rows + 1.2), layout="constrained")
    best = list(result.hypotheses[0].token_ids) if result.hypotheses else []
    # Position of each running beam (by slot) in the previous column; the root sits at the middle.
    parent_y = {slot: (n_rows - 1) / 2 for slot in range(len(steps[0]))}
    prefix_of = {slot: () for slot in parent_y}
    ax.scatter([0], [(n_rows - 1) / 2], color="black", s=30, zorder=3)
    ax.text(0, (n_rows - 1) / 2 + 0.35, "prompt", ha="center", fontsize=8)
    for t, step in enumerate(steps, start=1):
        next_parent_y, next_prefix = {}, {}
        for rank, c in enumerate(step):
            if c.status == "pruned" and not show_pruned:
                continue
            y = n_rows - 1 - rank
            prefix = prefix_of.get(c.parent, ()) + (c.token_id,)
            on_best = list(prefix) == best[: len(prefix)] and c.status != "pruned"
            add_tree_node(
                ax,
                t,
                parent_y.get(c.parent, (n_rows - 1) / 2),
                y,
                f"{short_label(tokenizer, c.token_id)} {c.logprob:.1f}",
                c.status,
                on_best,
            )
            if c.slot is not None:
                next_parent_y[c.slot], next_prefix[c.slot] = y, prefix
        parent_y, prefix_of = next_parent_y, next_prefix
    label_tree_axes(ax, len(steps))
    return ax


def tree_positions(result: BeamSearchResult) -> dict[tuple[int, ...], tuple[int, float]]:
    """Where `plot_beam_tree` draws each candidate: prefix (token ids) -> (step, y).

    >>> tree_positions(result)[(first_token,)]     # (1, y) of a step-1 candidate
    """
    n_rows = max(len(step) for step in result.steps)
    prefix_of: dict[int, tuple[int, ...]] = {slot: () for slot in range(len(result.steps[0]))}
    where: dict[tuple[int, ...], tuple[int, float]] = {}
    for t, step in enumerate(result.steps, start=1):
        next_prefix = {}
        for rank, c in enumerate(step):
            prefix = prefix_of.get(c.parent, ()) + (c.token_id,)
            where.setdefault(prefix, (t, n_rows - 1 - rank))
            if c.slot is not None:
                next_prefix[c.slot] = prefix
        prefix_of = next_prefix
    return where


def split_summary(split: Divergence, tokenizer: PreTrainedTokenizerBase, length: int) -> str:
    """Two lines: the step where beam search leaves greedy's path, and both sequences' total log p."""
    check_record(
        "split",
        split,
        "a Divergence (where beam search leaves greedy's path)",
        has=("step", "first_token", "second_token"),
    )
    greedy_token, beam_token = (repr(tokenizer.decode([t])) for t in (split.first_token, split.second_token))
    winner = "beam" if split.second_total > split.first_total else "greedy"
    return (
        f"step {split.step}: greedy takes {greedy_token} (p = {math.exp(split.first_logprob):.2f}), beam keeps "
        f"{beam_token} (p = {math.exp(split.second_logprob):.2f})\n"
        f"whole {length} tokens: greedy log p = {split.first_total:.2f}, beam log p = {split.second_total:.2f}"
        f"  ({winner} is more probable)"
    )


@with_alt_text(
    "Tree of beam search with greedy decoding's path drawn over it, and both sequences' log-probabilities"
)
def plot_beam_vs_greedy(
    result: BeamSearchResult,
    tokenizer: PreTrainedTokenizerBase,
    greedy_ids: Sequence[int],
    split: Divergence,
    ax: Axes | None = None,
) -> Axes:
    """`plot_beam_tree`, plus greedy's path (red, dashed, as far as the tree holds it), rings on the
    two tokens where beam search's winner leaves it, and both sequences' log p written underneath.

        >>> plot_beam_vs_greedy(result, tokenizer, greedy.token_ids, split)
    """
    check_record("result", result, "a BeamSearchResult (labkit.beam_search)", has=("steps",))
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 4.4), layout="constrained")
    plot_beam_tree(result, tokenizer, ax=ax)
    where = tree_positions(result)
    n_rows = max(len(step) for step in result.steps)
    path = [(0, (n_rows - 1) / 2)] + [
        where[tuple(greedy_ids[:t])] for t in range(1, len(greedy_ids) + 1) if tuple(greedy_ids[:t]) in where
    ]
    ax.plot(*zip(*path), color=GREEDY_COLOR, lw=1.5, ls="--", zorder=4, label="greedy's path")
    shared = tuple(greedy_ids[: split.step - 1])
    for token, color, name in (
        (split.first_token, GREEDY_COLOR, "greedy's token"),
        (split.second_token, BEAM_COLOR, "beam's token"),
    ):
        if shared + (token,) in where:
            x, y = where[shared + (token,)]
            ax.scatter(
                [x], [y], s=80, facecolors="none", edgecolors=color, linewidths=2, zorder=5, label=name
            )
    handles, _ = ax.get_legend_handles_labels()
    old = ax.get_legend()  # plot_beam_tree's: running / finished / pruned
    kept = [
        plt.Line2D([], [], color=h.get_color(), marker="o", lw=1, label=text.get_text())
        for h, text in zip(old.legend_handles, old.get_texts())
    ]
    ax.legend(handles=kept + handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_xlabel(split_summary(split, tokenizer, len(greedy_ids)), fontsize=9, loc="left")
    return ax
