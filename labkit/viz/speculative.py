"""Figures for the speculative decoding lab (notebook 09): the rounds drawn token by token, the
acceptance rule on two distributions, and expected tokens per target call.

    >>> draw_steps(result.stats.steps, tokenizer)
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

from labkit.core.doors import check_items
from labkit.speculative.generate import DraftStep
from labkit.speculative.rule import expected_tokens_per_step, residual_distribution
from labkit.viz.alt import with_alt_text
from labkit.viz.palette import BLUE, BLUISH_GREEN, VERMILLION

# Okabe-Ito (labkit.viz.palette): kept drafts and the target's replacements must not differ by red vs green alone.
ACCEPTED, REJECTED, RESAMPLED, BONUS = BLUISH_GREEN, "#9e9e9e", VERMILLION, BLUE


def _piece(tokenizer, token_id: int) -> str:
    text = tokenizer.decode([token_id]).replace("\n", "\\n")
    return text if text.strip() else repr(text)


@with_alt_text(
    "Diagram of speculative decoding rounds: accepted drafts, rejected drafts and the target model's own "
    "tokens"
)
def draw_steps(steps: Sequence[DraftStep], tokenizer, max_steps: int = 12, ax=None):
    """One row per round: accepted drafts (green), rejected drafts (grey, struck out), and the target's own
    token (orange when it replaces a rejected draft, blue when it is the bonus after all were kept)."""
    steps = check_items(
        "steps", steps, "DraftStep (from labkit.speculative_generate)", has=("proposed", "accepted", "token")
    )
    steps = list(steps)[:max_steps]
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 0.45 * len(steps) + 1))
    for row, step in enumerate(steps):
        x = 0.0
        pieces = [(t, ACCEPTED if i < step.accepted else REJECTED) for i, t in enumerate(step.proposed)]
        pieces.append((step.token, BONUS if step.bonus else RESAMPLED))
        for token, colour in pieces:
            text = _piece(tokenizer, token)
            ax.text(
                x,
                -row,
                text,
                color="white",
                fontsize=10,
                va="center",
                family="monospace",
                bbox={"facecolor": colour, "edgecolor": "none", "boxstyle": "round,pad=0.25"},
            )
            if colour == REJECTED:
                ax.plot([x, x + 0.11 * len(text)], [-row, -row], color="black", lw=1)
            x += 0.11 * len(text) + 0.35
    ax.set_xlim(-0.2, 14)
    ax.set_ylim(-len(steps) + 0.4, 0.7)
    ax.set_yticks([-r for r in range(len(steps))], [f"call {r + 1}" for r in range(len(steps))])
    ax.set_xticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in (ACCEPTED, REJECTED, RESAMPLED, BONUS)]
    ax.legend(
        handles,
        [
            "draft accepted",
            "draft rejected",
            "target's token (replaces a rejection)",
            "bonus token (all accepted)",
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.02),
        ncol=4,
        frameon=False,
    )
    ax.set_title("Speculative decoding, one target forward pass per row")
    return ax


@with_alt_text(
    "Bar chart of the target's and the draft's probabilities, the mass kept as drafted and the residual"
)
def plot_acceptance_rule(p: torch.Tensor, q: torch.Tensor, labels: Sequence[str], ax=None):
    """Bars of p (target), q (draft), min(p, q) (kept mass) and norm(max(0, p - q)) (the residual)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 3.5))
    x = torch.arange(len(labels)).float()
    width = 0.27
    ax.bar(x - width, p, width, label="p: target", color=BONUS)
    ax.bar(x, q, width, label="q: draft", color=REJECTED)
    ax.bar(
        x + width,
        residual_distribution(p[None], q[None])[0],
        width,
        label="residual norm(max(0, p - q))",
        color=RESAMPLED,
    )
    ax.step(
        torch.cat([x - 0.5, x[-1:] + 0.5]),
        torch.cat([torch.minimum(p, q), torch.minimum(p, q)[-1:]]),
        where="post",
        color=ACCEPTED,
        label="min(p, q): kept as drafted",
    )
    ax.set_xticks(x, labels)
    ax.set_ylabel("probability")
    ax.legend(fontsize=8)
    return ax


@with_alt_text(
    "Line chart of expected tokens per target call against the number of drafted tokens, one line per "
    "acceptance rate, with measurements"
)
def plot_expected_tokens(
    measured: Sequence[tuple[int, float, float]] = (),
    alphas: Sequence[float] = (0.5, 0.7, 0.9),
    max_gamma: int = 10,
    ax=None,
):
    """E = (1 - alpha^(gamma+1)) / (1 - alpha) against gamma; measured: (gamma, alpha, tokens per call)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    gammas = list(range(1, max_gamma + 1))
    for alpha in alphas:
        ax.plot(
            gammas, [expected_tokens_per_step(alpha, g) for g in gammas], label=f"formula, alpha = {alpha}"
        )
    if measured:
        ax.scatter(
            [m[0] for m in measured], [m[2] for m in measured], color="black", zorder=3, label="measured"
        )
        ax.plot(
            [m[0] for m in measured],
            [expected_tokens_per_step(m[1], m[0]) for m in measured],
            "k--",
            lw=1,
            label="formula at the measured alpha",
        )
    ax.set_xlabel("gamma (draft tokens per call)")
    ax.set_ylabel("tokens per target call")
    ax.legend(fontsize=8)
    return ax


@with_alt_text("Bar chart of the measured decode speed-up over plain greedy decoding, one group per task")
def plot_speedups(rows, ax=None):
    """Bars of the measured decode speed-up over plain greedy (median rate / median plain rate, the prompt's
    prefill timed apart), one group per task, with the range of the per-round ratios as error bars; a white
    diamond on each bar marks the end-to-end speed-up (prefill included). rows: labkit.speculative.sweep.SweepRow."""
    rows = check_items(
        "rows", rows, "SweepRow (labkit.speculative.sweep.speedup_sweep)", has=("task", "drafter", "gamma")
    )
    tasks = list(dict.fromkeys(r.task for r in rows))
    labels = list(dict.fromkeys(f"{r.drafter}, gamma={r.gamma}" for r in rows))
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 3.6))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        picked = [r for t in tasks for r in rows if r.task == t and f"{r.drafter}, gamma={r.gamma}" == label]
        x = [tasks.index(r.task) + (i - (len(labels) - 1) / 2) * width for r in picked]
        ys = [r.decode.ratio for r in picked]
        errors = [
            [max(0.0, r.decode.ratio - r.decode.ratio_range[0]) for r in picked],
            [max(0.0, r.decode.ratio_range[1] - r.decode.ratio) for r in picked],
        ]
        ax.bar(x, ys, width, yerr=errors, capsize=3, label=label)
        ax.plot(
            x,
            [r.end_to_end.ratio for r in picked],
            "D",
            markerfacecolor="white",
            markeredgecolor="black",
            markersize=5,
            linestyle="none",
            zorder=3,
            label="end to end (prefill included)" if i == 0 else None,
        )
    ax.axhline(1.0, color="black", lw=1, ls="--")
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_ylabel("speed-up over plain greedy")
    # room for the legend
    ax.set_ylim(0, 1.4 * max(max(r.decode.ratio_range[1], r.end_to_end.ratio) for r in rows))
    ax.legend(fontsize=8, ncol=3, loc="upper right")
    ax.set_title("Decode speed-up, prefill timed apart (bars: range of the rounds; ◇: end to end)")
    return ax
