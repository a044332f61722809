"""Matplotlib figures for the course: what the model considers at each step of generation.

Every function takes plain tensors or the `Step`s that `labkit.generate` yields and returns the
matplotlib Axes or Figure it drew on; pass `ax=` to draw into a figure of your own.

    >>> probs = torch.softmax(model(input_ids).logits[0, -1], dim=-1)      # [V]
    >>> plot_next_token_distribution(probs, tokenizer, top_k=10, chosen=int(probs.argmax()))
    >>> plt.show()
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import matplotlib.pyplot as plt
import torch
from matplotlib import font_manager, ft2font
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.doors import check_items, check_table, check_tensor
from labkit.decoding.request import Step
from labkit.core.text import INCOMPLETE_CHARACTER
from labkit.viz.alt import with_alt_text

CHOSEN_COLOR = "tab:orange"  # the token that was picked
OTHER_COLOR = "tab:blue"  # the candidates that were not
REST_COLOR = "tab:gray"  # the bar that holds the mass of every token not drawn on its own
REST_ID = -1  # the token id of that bar (no real token has it)


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
        raise ValueError("This Step carries no logits: generate with return_logits=True to draw distributions, "
                         "e.g. labkit.generate(model, tokenizer, prompt, return_logits=True).")
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


def top_candidates(probs_or_logits: torch.Tensor, tokenizer: PreTrainedTokenizerBase,
                   top_k: int = 10) -> list[TokenCandidate]:
    """The top_k most likely next tokens of one distribution [V], most likely first.

        >>> top_candidates(step.logits, tokenizer, top_k=3)[0].label
        "' Paris'"
    """
    check_int("top_k", top_k, minimum=1)
    probs = as_probs(probs_or_logits)
    values, ids = probs.topk(min(top_k, probs.shape[0]))
    return [TokenCandidate(int(i), token_label(tokenizer, int(i)), float(p)) for p, i in zip(values, ids)]


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
    check_tensor("probs_or_logits", probs_or_logits, "[V] (or [1, V]) of one position's probabilities or logits",
                 dims=(1, 2))
    probs = as_probs(probs_or_logits)
    chosen = None if chosen is None else int(chosen)
    if chosen is not None and not 0 <= chosen < probs.shape[0]:
        raise ValueError(f"chosen must be a token id in [0, {probs.shape[0]}), got {chosen}.")
    if tokens is not None:
        tokens = [int(t) for t in tokens]
        if not tokens or len(set(tokens)) != len(tokens) or not all(0 <= t < probs.shape[0] for t in tokens):
            raise ValueError(f"tokens must be distinct token ids in [0, {probs.shape[0]}), at least one; "
                             f"got {tokens}.")
    candidates = (top_candidates(probs, tokenizer, top_k) if tokens is None else
                  [TokenCandidate(t, token_label(tokenizer, t), float(probs[t])) for t in tokens])
    if chosen is not None and all(c.token_id != chosen for c in candidates):
        candidates.append(TokenCandidate(chosen, token_label(tokenizer, chosen), float(probs[chosen])))
    if tokens is not None:  # the rest of the mass, so both panels of a comparison sum to 1
        rest = max(0.0, 1.0 - sum(c.prob for c in candidates))
        candidates.append(TokenCandidate(REST_ID, "every other token", rest))
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 0.3 * len(candidates) + 1.0), layout="constrained")
    rows = range(len(candidates))[::-1]  # the first candidate drawn at the top
    colors = [CHOSEN_COLOR if c.token_id == chosen else REST_COLOR if c.token_id == REST_ID else OTHER_COLOR
              for c in candidates]
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
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.2 * n_cols, (0.25 * top_k + 1.1) * n_rows),
                             squeeze=False, layout="constrained")
    for index, (ax, step) in enumerate(zip(axes.flat, shown)):
        plot_next_token_distribution(step_logits(step), tokenizer, top_k=top_k, chosen=step.token_id, ax=ax,
                                     title=f"step {index + 1}: {token_label(tokenizer, step.token_id)}")
        ax.set_xlabel("")
    for ax in list(axes.flat)[len(shown):]:
        ax.set_visible(False)
    return fig


@with_alt_text("Bar chart of each generated token's probability when chosen, beside the runner-up's")
def plot_step_confidence(steps: Sequence[Step], tokenizer: PreTrainedTokenizerBase,
                         ax: Axes | None = None) -> Axes:
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
    ax.bar([p + 0.2 for p in positions], runner_up, width=0.4, color=OTHER_COLOR, alpha=0.5,
           label="best other token")
    ax.set_xticks(list(positions), [drawable(token_label(tokenizer, s.token_id)) for s in steps], rotation=60,
                  ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("probability")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return ax


# --- decoding (notebooks 03-05) ------------------------------------------------------------------

KEPT_COLOR = "tab:blue"  # a token a truncation keeps
CUT_COLOR = "lightgray"  # a token it masks
RENORMALIZED_COLOR = "tab:orange"  # the kept tokens' probability after renormalising


@with_alt_text("Bar chart of the top tokens: which a sampling rule keeps and which it cuts, and the kept ones' "
               "probabilities after renormalising")
def plot_kept_vs_cut(logits: torch.Tensor, transformed: torch.Tensor, tokenizer: PreTrainedTokenizerBase,
                     top_k: int = 15, ax: Axes | None = None, title: str | None = None, *, log: bool = False,
                     columns: bool = False) -> Axes:
    """The top_k tokens of the original distribution [V]: kept ones in blue, cut ones in grey, and
    (in orange) the probability each kept token has after the cut, renormalised.

    log: a logarithmic probability axis, so the tail's bars stay visible beside the head's.
    columns: one column per token, the most likely on the left (room for 40 tokens), instead of rows.

        >>> after = labkit.sampling.top_p_filter(logits[None], 0.9)[0]
        >>> plot_kept_vs_cut(logits, after, tokenizer)
        >>> plot_kept_vs_cut(logits, after, tokenizer, top_k=40, log=True, columns=True)
    """
    check_tensor("logits", logits, "[V] (or [1, V]) of one position's scores", dims=(1, 2))
    check_tensor("transformed", transformed, "[V] (or [1, V]) of the scores after a sampling rule", dims=(1, 2))
    before, after = as_probs(logits), torch.softmax(transformed.detach().float().cpu().reshape(-1), dim=-1)
    kept = torch.isfinite(transformed.detach().reshape(-1).cpu())
    values, ids = before.topk(min(top_k, before.shape[0]))
    if ax is None:
        size = (max(6.0, 0.2 * len(ids) + 1.5), 3.4) if columns else (7, 0.28 * len(ids) + 1.2)
        _, ax = plt.subplots(figsize=size, layout="constrained")
    places = list(range(len(ids))) if columns else list(range(len(ids)))[::-1]
    colors = [KEPT_COLOR if kept[i] else CUT_COLOR for i in ids]
    survivors = [(place, float(after[i])) for place, i in zip(places, ids) if kept[i]]
    labels = [drawable(token_label(tokenizer, int(i))) for i in ids]
    bars = ax.bar if columns else ax.barh
    bars(places, values.tolist(), 0.8, color=colors, label="before (blue: kept, grey: cut)")
    bars([place for place, _ in survivors], [p for _, p in survivors], 0.3, color=RENORMALIZED_COLOR,
         label="after, renormalised")
    top = max(float(values.max()), float(after[kept].max()))
    limits = (float(values.min()) / 2, min(1.0, top * 2)) if log else (0, min(1.0, top * 1.15 + 0.02))
    if columns:
        ax.set_xticks(places, labels, rotation=90, fontsize=7)
        ax.set_xlim(-0.6, len(ids) - 0.4)
        ax.set(yscale="log" if log else "linear", ylim=limits, ylabel="probability")
    else:
        ax.set_yticks(places, labels, fontsize=8)
        ax.set(xscale="log" if log else "linear", xlim=limits, xlabel="probability")
    n_kept = int(kept.sum())
    ax.set_title(drawable(title or "") + f"{' · ' if title else ''}{n_kept:,} of {kept.numel():,} tokens kept",
                 fontsize=10)
    ax.legend(loc="upper right" if columns else "lower right", fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return ax


@with_alt_text("Line chart of the surprise in bits of each generated token, one line per run")
def plot_surprise(runs: dict, tau: float | None = None, ax: Axes | None = None) -> Axes:
    """Surprise (-log2 p, bits) of each generated token, one line per run, e.g. {"mirostat": [..]}.

    tau: draw the target surprise as a dashed line.

        >>> plot_surprise({"mirostat v2": run.surprises, "top-k 40": other}, tau=3.0)
    """
    check_table("runs", runs, "surprises in bits per token (lists of numbers)", of=Iterable)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.2), layout="constrained")
    for name, values in runs.items():
        values = list(values)
        ax.plot(range(1, len(values) + 1), values, marker=".", lw=1, label=drawable(str(name)))
    if tau is not None:
        ax.axhline(tau, color="black", ls="--", lw=1, label=f"target tau = {tau:g}")
    ax.set_xlabel("generated token")
    ax.set_ylabel("surprise (bits)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return ax
