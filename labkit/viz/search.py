"""Figures for search (notebook 03): the beam tree annotated where beam search leaves greedy's path.

    >>> split = first_divergence(model, prompt_ids, greedy.token_ids, result.best.token_ids)
    >>> plot_beam_vs_greedy(result, tokenizer, greedy.token_ids, split)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from transformers import PreTrainedTokenizerBase

from labkit.decoding.exact import Divergence
from labkit.decoding.search import BeamSearchResult
from labkit.viz import plots

GREEDY_COLOR = "tab:red"  # greedy's path
BEAM_COLOR = "tab:orange"  # the token beam search keeps where the paths part


def tree_positions(result: BeamSearchResult) -> dict[tuple[int, ...], tuple[int, float]]:
    """Where `plots.plot_beam_tree` draws each candidate: prefix (token ids) -> (step, y).

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
    greedy_token, beam_token = (repr(tokenizer.decode([t])) for t in (split.first_token, split.second_token))
    winner = "beam" if split.second_total > split.first_total else "greedy"
    return (f"step {split.step}: greedy takes {greedy_token} (p = {math.exp(split.first_logprob):.2f}), beam keeps "
            f"{beam_token} (p = {math.exp(split.second_logprob):.2f})\n"
            f"whole {length} tokens: greedy log p = {split.first_total:.2f}, beam log p = {split.second_total:.2f}"
            f"  ({winner} is more probable)")


def plot_beam_vs_greedy(result: BeamSearchResult, tokenizer: PreTrainedTokenizerBase, greedy_ids: Sequence[int],
                        split: Divergence, ax: Axes | None = None) -> Axes:
    """`plots.plot_beam_tree`, plus greedy's path (red, dashed, as far as the tree holds it), rings on the
    two tokens where beam search's winner leaves it, and both sequences' log p written underneath.

        >>> plot_beam_vs_greedy(result, tokenizer, greedy.token_ids, split)
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 4.4), layout="constrained")
    plots.plot_beam_tree(result, tokenizer, ax=ax)
    where = tree_positions(result)
    n_rows = max(len(step) for step in result.steps)
    path = [(0, (n_rows - 1) / 2)] + [where[tuple(greedy_ids[:t])] for t in range(1, len(greedy_ids) + 1)
                                      if tuple(greedy_ids[:t]) in where]
    ax.plot(*zip(*path), color=GREEDY_COLOR, lw=1.5, ls="--", zorder=4, label="greedy's path")
    shared = tuple(greedy_ids[:split.step - 1])
    for token, color, name in ((split.first_token, GREEDY_COLOR, "greedy's token"),
                               (split.second_token, BEAM_COLOR, "beam's token")):
        if shared + (token,) in where:
            x, y = where[shared + (token,)]
            ax.scatter([x], [y], s=80, facecolors="none", edgecolors=color, linewidths=2, zorder=5, label=name)
    handles, _ = ax.get_legend_handles_labels()
    old = ax.get_legend()  # plot_beam_tree's: running / finished / pruned
    kept = [plt.Line2D([], [], color=h.get_color(), marker="o", lw=1, label=text.get_text())
            for h, text in zip(old.legend_handles, old.get_texts())]
    ax.legend(handles=kept + handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
              frameon=False)
    ax.set_xlabel(split_summary(split, tokenizer, len(greedy_ids)), fontsize=9, loc="left")
    return ax
