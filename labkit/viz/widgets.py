"""ipywidgets UIs. Each has a static fallback that reads well where no slider can move (GitHub, CI).

>>> steps = list(labkit.generate(model, tokenizer, prompt, max_new_tokens=12))
>>> generation_stepper(steps, tokenizer)              # drag the slider through the steps
>>> print(top_candidates_table(steps, tokenizer))     # the same information, as text
"""

from __future__ import annotations

import html
import io
import os
from collections.abc import Sequence

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.doors import check_items, check_model
from labkit.core.forward import all_logits
from labkit.decoding.config import DecodingConfig
from labkit.decoding.generate import generate_text
from labkit.decoding.request import Step
from labkit.decoding.transforms import apply_transforms
from labkit.viz.plots import plot_next_token_distribution
from labkit.viz.sampling import plot_kept_vs_cut
from labkit.viz.tokens import step_logits, token_label, top_candidates

HIGHLIGHT_STYLE = "background: #ffd8a8; border-bottom: 2px solid #f08c00"  # the current token
PROMPT_STYLE = "color: #868e96"  # the prompt, greyed out


def _decode(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False)


class GenerationStepper(widgets.VBox):
    """A slider over the steps of a finished generation: the top candidates at that step and the
    text so far, with the token chosen at that step highlighted.

    Attributes: `slider` (IntSlider, 1..len(steps)), `text` (HTML), `chart` (Image, PNG).
    """

    def __init__(
        self, steps: Sequence[Step], tokenizer: PreTrainedTokenizerBase, top_k: int = 10, prompt: str = ""
    ):
        if not steps:
            raise ValueError("No steps to show: pass the list of Steps from labkit.generate(...).")
        check_int("top_k", top_k, minimum=1)
        self.steps, self.tokenizer, self.top_k, self.prompt = list(steps), tokenizer, top_k, prompt
        self.slider = widgets.IntSlider(
            value=1, min=1, max=len(self.steps), description="step", continuous_update=True
        )
        self.text = widgets.HTML()
        self.chart = widgets.Image(format="png")
        self._figure = Figure(figsize=(6, 0.3 * top_k + 1.0), layout="constrained")
        self._ax = self._figure.add_subplot()
        super().__init__([self.slider, self.text, self.chart])
        self.slider.observe(self._on_change, names="value")
        self.show_step(1)

    def show_step(self, number: int) -> None:
        """Redraw for step `number` (1-based, as on the slider)."""
        index = number - 1
        step = self.steps[index]
        ids = [s.token_id for s in self.steps]
        upto = _decode(self.tokenizer, ids[: index + 1])
        # Where the texts before and after this token part (a completed emoji replaces its '�'s).
        shared = len(os.path.commonprefix([_decode(self.tokenizer, ids[:index]), upto]))
        before, current = upto[:shared], upto[shared:]
        finish = f" &nbsp; finish_reason = <b>{step.finish_reason}</b>" if step.finish_reason else ""
        self.text.value = (
            f"<div style='font-family: monospace; white-space: pre-wrap; line-height: 1.6'>"
            f"<span style='{PROMPT_STYLE}'>{html.escape(self.prompt)}</span>{html.escape(before)}"
            f"<span style='{HIGHLIGHT_STYLE}'>{html.escape(current) or '&#8203;'}</span></div>"
            f"<div>step {number} of {len(self.steps)}: chose "
            f"<code>{html.escape(token_label(self.tokenizer, step.token_id))}</code> "
            f"(id {step.token_id}){finish}</div>"
        )
        self._ax.clear()
        plot_next_token_distribution(
            step_logits(step),
            self.tokenizer,
            top_k=self.top_k,
            chosen=step.token_id,
            ax=self._ax,
            title=f"candidates for token {number}",
        )
        buffer = io.BytesIO()
        self._figure.savefig(buffer, format="png", dpi=90)
        self.chart.value = buffer.getvalue()

    def _on_change(self, change: dict) -> None:
        self.show_step(change["new"])

    def __repr__(self) -> str:
        # Short and deterministic: this is what GitHub and nbval see in place of the live widget.
        return f"GenerationStepper({len(self.steps)} steps; run the notebook to move the slider)"


def generation_stepper(
    steps: Sequence[Step], tokenizer: PreTrainedTokenizerBase, top_k: int = 10, prompt: str = ""
) -> GenerationStepper:
    """A slider over `steps` (from `labkit.generate`) showing the top_k candidates at each step.

    prompt: optional text shown in grey before the generated text.
    Static fallbacks: `labkit.viz.plots.plot_generation_steps`, and `top_candidates_table` below.

        >>> generation_stepper(list(labkit.generate(model, tokenizer, "Once upon a time")), tokenizer)
    """
    steps = check_items("steps", steps, "Step (from labkit.generate)", has=("token_id", "logits"))
    return GenerationStepper(steps, tokenizer, top_k=top_k, prompt=prompt)


def top_candidates_table(steps: Sequence[Step], tokenizer: PreTrainedTokenizerBase, top_k: int = 3) -> str:
    """A text table, one row per step: the chosen token and the top_k candidates in whole percent.

    Whole percent keeps the table identical from one machine to the next.

        >>> print(top_candidates_table(steps, tokenizer))
        step  chosen      candidates
           1  'The'       'The' 15%   'L' 14%   'La' 10%
    """
    steps = check_items("steps", steps, "Step (from labkit.generate)", has=("token_id", "logits"))
    if not steps:
        raise ValueError("No steps to show: pass the list of Steps from labkit.generate(...).")
    rows = []
    for number, step in enumerate(steps, start=1):
        cells = [
            f"{c.label} {c.prob:.0%}" if c.prob >= 0.005 else f"{c.label} <1%"
            for c in top_candidates(step_logits(step), tokenizer, top_k)
        ]
        rows.append((str(number), token_label(tokenizer, step.token_id), cells, step.finish_reason))
    chosen_width = max(len("chosen"), *(len(r[1]) for r in rows))
    cell_width = max(len(c) for r in rows for c in r[2])
    lines = [f"{'step':>4}  {'chosen':<{chosen_width}}  candidates"]
    for number, chosen, cells, finish in rows:
        line = f"{number:>4}  {chosen:<{chosen_width}}  " + "  ".join(f"{c:<{cell_width}}" for c in cells)
        lines.append(line.rstrip() + (f"   <- finish_reason={finish!r}" if finish else ""))
    return "\n".join(lines)


# --- decoding (notebook 04) ----------------------------------------------------------------------


class SamplingExplorer(widgets.VBox):
    """Sliders for temperature, top-k, top-p, min-p and typical-p over one real next-token
    distribution: the chart redraws which tokens are kept (blue) or cut (grey), and a continuation
    is resampled with those settings (seeded, so a slider move is the only thing that changes it).

    Attributes: the sliders (`temperature`, `top_k`, `top_p`, `min_p`, `typical_p`, `seed`),
    `chart` (Image, PNG), `text` (HTML), and `config` (the DecodingConfig shown).
    """

    def __init__(
        self,
        model,
        tokenizer: PreTrainedTokenizerBase,
        prompt_ids: Sequence[int],
        max_new_tokens: int = 24,
        top: int = 12,
        prompt_text: str = "",
    ):
        self.model, self.tokenizer, self.prompt_ids = model, tokenizer, list(prompt_ids)
        self.max_new_tokens, self.top, self.prompt_text = max_new_tokens, top, prompt_text
        self.logits = all_logits(model, self.prompt_ids)[-1]  # [V]
        style = {"description_width": "90px"}
        slider = dict(continuous_update=False, style=style, layout=widgets.Layout(width="420px"))
        self.temperature = widgets.FloatSlider(
            value=1.0, min=0.0, max=2.0, step=0.05, description="temperature", **slider
        )
        self.top_k = widgets.IntSlider(value=0, min=0, max=100, description="top_k (0=off)", **slider)
        self.top_p = widgets.FloatSlider(
            value=1.0, min=0.05, max=1.0, step=0.05, description="top_p", **slider
        )
        self.min_p = widgets.FloatSlider(
            value=0.0, min=0.0, max=0.5, step=0.01, description="min_p", **slider
        )
        self.typical_p = widgets.FloatSlider(
            value=1.0, min=0.05, max=1.0, step=0.05, description="typical_p", **slider
        )
        self.seed = widgets.IntSlider(value=0, min=0, max=20, description="seed", **slider)
        self.chart = widgets.Image(format="png")
        self.text = widgets.HTML()
        self._figure = Figure(figsize=(7, 0.28 * top + 1.3), layout="constrained")
        self._ax = self._figure.add_subplot()
        controls = [self.temperature, self.top_k, self.top_p, self.min_p, self.typical_p, self.seed]
        super().__init__(
            [widgets.HBox([widgets.VBox(controls[:3]), widgets.VBox(controls[3:])]), self.chart, self.text]
        )
        for control in controls:
            control.observe(lambda _: self.redraw(), names="value")
        self.redraw()

    @property
    def config(self) -> DecodingConfig:
        sampling = self.temperature.value > 0
        return DecodingConfig(
            temperature=float(self.temperature.value),
            max_new_tokens=self.max_new_tokens,
            seed=int(self.seed.value),
            top_k=int(self.top_k.value) if sampling else 0,
            top_p=float(self.top_p.value) if sampling else 1.0,
            min_p=float(self.min_p.value) if sampling else 0.0,
            typical_p=float(self.typical_p.value) if sampling else 1.0,
        )

    def redraw(self) -> None:
        """Recompute the kept set, the chart and the continuation for the current slider values."""
        config = self.config
        ids = torch.tensor([self.prompt_ids])
        transformed = apply_transforms(self.logits[None], ids, config.transforms(len(self.prompt_ids)))[0]
        if not config.do_sample:  # greedy keeps only the argmax
            transformed = torch.full_like(self.logits, float("-inf"))
            transformed[int(self.logits.argmax())] = self.logits.max()
        self._ax.clear()
        plot_kept_vs_cut(
            self.logits,
            transformed,
            self.tokenizer,
            top_k=self.top,
            ax=self._ax,
            title="greedy" if not config.do_sample else None,
        )
        buffer = io.BytesIO()
        self._figure.savefig(buffer, format="png", dpi=90)
        self.chart.value = buffer.getvalue()
        continuation = generate_text(self.model, self.tokenizer, self.prompt_ids, config)
        self.text.value = (
            f"<div style='font-family: monospace; white-space: pre-wrap'>"
            f"<span style='{PROMPT_STYLE}'>{html.escape(self.prompt_text)}</span>"
            f"<b>{html.escape(continuation)}</b></div>"
        )

    def __repr__(self) -> str:
        return "SamplingExplorer(run the notebook to move the sliders)"


def sampling_explorer(
    model,
    tokenizer: PreTrainedTokenizerBase,
    prompt_ids: Sequence[int],
    max_new_tokens: int = 24,
    top: int = 12,
    prompt_text: str = "",
) -> SamplingExplorer:
    """Sliders over temperature, top-k, top-p, min-p, typical-p and the seed for one prompt.

    Static fallback: `labkit.viz.sampling.plot_kept_vs_cut` for fixed settings.

        >>> sampling_explorer(model, tokenizer, labkit.chat_prompt(tokenizer, "Tell me a joke."))
    """
    check_model("model", model)
    return SamplingExplorer(
        model, tokenizer, prompt_ids, max_new_tokens=max_new_tokens, top=top, prompt_text=prompt_text
    )
