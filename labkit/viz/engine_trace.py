"""The continuous-batching engine step by step (notebook 10): a traced run and its pictures.

`run_traced` drives a real `Engine` and records a `Snapshot` after every step: which requests ran (a
prefill, a decode, or both in a chunked-prefill step), who waits, who was preempted and which pool blocks
each running request holds. Everything else reads that `Trace`: `format_trace` as one line per step (the
static fallback), `draw_timeline` as a grid of requests by steps, `draw_engine_blocks` as the block tables
after one step, and `engine_stepper` as a slider over the steps that redraws both.

    >>> trace = run_traced(engine, [("The sea is", {"max_new_tokens": 8})], arrivals=[0])
    >>> draw_timeline(trace); print(format_trace(trace)); engine_stepper(trace)
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral

import ipywidgets as widgets
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from labkit.core.doors import check_items, check_record
from labkit.serving.engine import Engine
from labkit.viz.alt import with_alt_text

STATE_COLORS = {"waiting": "#d9d9d9", "prefill": "#9b6fd1", "decode": "#4caf50", "paused": "#c8e6c9"}


@dataclass(frozen=True)
class Snapshot:
    """The engine right after one step: what ran, who waits, who holds which blocks."""

    step: int  # 0, 1, ...
    kind: str  # "prefill", "decode", "mixed" (both, chunked prefill) or "idle" (no request yet)
    batch: tuple[int, ...]  # request ids in the forward pass
    preempted: tuple[int, ...]  # sent back to the queue by this step's schedule
    waiting: tuple[int, ...]  # arrived, not running (after the step)
    running: tuple[int, ...]  # holding blocks (after the step)
    finished: tuple[int, ...]  # finished during this step
    block_tables: dict[int, tuple[int, ...]]  # request id -> its blocks (running requests, after the step)
    blocks_used: int  # pool blocks in use after the step
    # requests of the batch that fed (a chunk of) their prompt; the others decoded
    prefilled: tuple[int, ...] = ()


@dataclass(frozen=True)
class Trace:
    """A traced engine run: one Snapshot per step, when each request arrived, and the pool's size."""

    snapshots: tuple[Snapshot, ...]
    arrivals: dict[int, int]  # request id -> the step before which it was added
    n_blocks: int
    block_size: int


def run_traced(engine: Engine, requests: Sequence[tuple], arrivals: Sequence[int]) -> Trace:
    """Add requests[i] = (prompt, options dict) before step arrivals[i]; step until all finish; record each step."""
    check_items("requests", requests, "(prompt, options dict) pairs", of=(tuple, list))
    check_items("arrivals", arrivals, "arrival steps (whole numbers)", of=Integral)
    if len(requests) != len(arrivals) or list(arrivals) != sorted(arrivals):
        raise ValueError("Give one arrival step per request, in increasing order.")
    check_record("engine", engine, "a labkit Engine (labkit.serving.engine.Engine)", of=Engine)
    snapshots, arrived, added = [], {}, 0
    while added < len(requests) or engine.has_unfinished():
        step = len(snapshots)
        while added < len(requests) and arrivals[added] <= step:
            prompt, options = requests[added]
            arrived[engine.add_request(prompt, **options)] = step
            added += 1
        scheduler, before = engine.scheduler, len(engine.step_metrics)
        was_running = {s.request_id for s in scheduler.running}
        outputs = engine.step()
        if len(engine.step_metrics) == before:  # nothing to run: no request has arrived yet
            snapshots.append(Snapshot(step, "idle", (), (), (), (), (), {}, 0))
            continue
        metrics, ran = engine.step_metrics[-1], engine.last_batch
        batch = tuple(seq.request_id for seq in ran.seqs)
        preempted = tuple(s.request_id for s in scheduler.waiting if s.request_id in was_running)
        snapshots.append(
            Snapshot(
                step,
                metrics.kind,
                batch,
                preempted,
                tuple(s.request_id for s in scheduler.waiting),
                tuple(s.request_id for s in scheduler.running),
                tuple(out.request_id for out in outputs if out.finish_reason is not None),
                {s.request_id: tuple(s.block_table) for s in scheduler.running},
                metrics.blocks_used,
                tuple(seq.request_id for seq in ran.seqs[ran.n_decode :]),
            )
        )
    return Trace(tuple(snapshots), arrived, engine.pool.allocator.n_blocks, engine.block_manager.block_size)


def format_trace(trace: Trace, first: int | None = None) -> str:
    """One line per step: its kind, the batch, the queue, blocks in use and what happened (static fallback).

    first: only the first steps (a line then says how many more there are)."""
    check_record("trace", trace, "a Trace (labkit.viz.serving.run_traced)", of=Trace)
    lines = ["step  kind     batch                 waiting      blocks  events"]
    for s in trace.snapshots[:first]:
        events = [f"#{i} finished" for i in s.finished] + [f"#{i} PREEMPTED" for i in s.preempted]
        events += [f"#{i} arrives" for i, step in trace.arrivals.items() if step == s.step]
        batch = " ".join(f"#{i}" for i in s.batch)
        waiting = " ".join(f"#{i}" for i in s.waiting) or "-"
        lines.append(
            f"{s.step:>4}  {s.kind:<7}  {batch:<20}  {waiting:<11}  {s.blocks_used:>3}/{trace.n_blocks:<3} "
            f"{', '.join(events)}".rstrip()
        )
    if first is not None and first < len(trace.snapshots):
        lines.append(f"... {len(trace.snapshots) - first} more steps")
    return "\n".join(lines)


def timeline_states(trace: Trace) -> dict[int, list[str | None]]:
    """request id -> its state at every step: None (not arrived / done), waiting, prefill, decode, paused."""
    states = {request_id: [None] * len(trace.snapshots) for request_id in trace.arrivals}
    for s in trace.snapshots:
        for request_id, arrival in trace.arrivals.items():
            if request_id in s.batch:
                states[request_id][s.step] = "prefill" if request_id in s.prefilled else "decode"
            elif arrival <= s.step and request_id in s.waiting:
                states[request_id][s.step] = "waiting"
            elif request_id in s.running:
                states[request_id][s.step] = "paused"  # running, but this step prefilled others
    return states


@with_alt_text(
    "Timeline grid of requests by engine steps: waiting, prefill, decode or paused, with preemptions crossed"
)
def draw_timeline(trace: Trace, upto: int | None = None, ax=None):
    """Rows = requests, columns = engine steps: waiting, prefill, decode, or paused while others prefill;
    a red cross where a request was preempted. `upto` draws a cursor at that step. Returns the Axes."""
    check_record("trace", trace, "a Trace (labkit.viz.serving.run_traced)", of=Trace)
    states = timeline_states(trace)
    n_steps = len(trace.snapshots)
    if ax is None:
        _, ax = plt.subplots(
            figsize=(min(12, 2.5 + 0.16 * n_steps), 0.4 * len(states) + 1.3), layout="constrained"
        )
    for row, (request_id, row_states) in enumerate(states.items()):
        for step, state in enumerate(row_states):
            if state is not None:
                ax.add_patch(Rectangle((step, row - 0.4), 1, 0.8, facecolor=STATE_COLORS[state], lw=0))
    for s in trace.snapshots:
        for request_id in s.preempted:
            row = list(states).index(request_id)
            ax.plot(s.step + 0.5, row, "x", color="black", markersize=9, mew=2)
    if upto is not None:
        ax.axvline(upto + 1, color="black", lw=1.2)
    ax.set_xlim(0, n_steps)
    ax.set_ylim(len(states) - 0.5, -0.5)
    ax.set_yticks(range(len(states)), [f"#{i}" for i in states])
    ax.set(xlabel="engine step", ylabel="request")
    handles = [Patch(color=color, label=name) for name, color in STATE_COLORS.items()]
    handles.append(plt.Line2D([], [], marker="x", color="black", ls="", mew=2, label="preempted"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    return ax


@with_alt_text(
    "Diagram of the engine's block tables after one step: each running request's KV cache blocks, shared "
    "blocks outlined"
)
def draw_engine_blocks(trace: Trace, step: int, ax=None):
    """The block tables after `step`, as the engine holds them: one row per running request, its i-th box
    the pool block that holds its tokens 16i..16i+15 (block size 16), labelled with that block's number and
    coloured by the request; a block several requests share (a cached prefix) gets a thick edge. Only the
    blocks in use are drawn; the title says how many of the pool's are. Returns the Axes."""
    check_record("trace", trace, "a Trace (labkit.viz.serving.run_traced)", of=Trace)
    s = trace.snapshots[step]
    holders: dict[int, int] = {}
    for table in s.block_tables.values():
        for block in table:
            holders[block] = holders.get(block, 0) + 1
    rows = sorted(s.block_tables)
    width = max((len(table) for table in s.block_tables.values()), default=1)
    if ax is None:
        _, ax = plt.subplots(
            figsize=(min(11, max(7.5, 2.5 + 0.7 * width)), 1.1 + 0.35 * max(len(rows), 1)),
            layout="constrained",
        )
    palette = plt.get_cmap("tab10")
    for y, request_id in enumerate(rows):
        for i, block in enumerate(s.block_tables[request_id]):
            shared = holders[block] > 1
            ax.add_patch(
                Rectangle(
                    (i, y),
                    0.92,
                    0.8,
                    facecolor=palette(request_id % 10),
                    alpha=0.75,
                    edgecolor="black",
                    lw=2.2 if shared else 0.6,
                )
            )
            ax.text(i + 0.46, y + 0.4, str(block), ha="center", va="center", fontsize=8)
    ax.set_xlim(-0.1, width + 0.1)
    ax.set_ylim(len(rows) if rows else 1, -0.2)
    ax.set_yticks([y + 0.4 for y in range(len(rows))], [f"#{r}" for r in rows])
    ax.set_xticks(
        [i + 0.46 for i in range(width)],
        [f"{i * trace.block_size}-{(i + 1) * trace.block_size - 1}" for i in range(width)],
    )
    ax.tick_params(length=0, labelsize=8)
    ax.set_xlabel(
        "the request's tokens; in each box, the number of the pool block that holds them", fontsize=8
    )
    for side in ax.spines.values():
        side.set_visible(False)
    shared = sum(count > 1 for count in holders.values())
    ax.set_title(
        f"after step {step} ({s.kind}): {s.blocks_used} of {trace.n_blocks} blocks of {trace.block_size} "
        f"tokens in use, {shared} shared (thick edge)",
        fontsize=9,
    )
    return ax


class EngineStepper(widgets.VBox):
    """A slider over a traced engine run: the timeline with a cursor, the pool's blocks and the step's line.

    Attributes: `slider` (IntSlider over steps), `text` (HTML), `chart` (Image, PNG).
    """

    def __init__(self, trace: Trace, step: int = 0):
        self.trace = trace
        self.slider = widgets.IntSlider(
            value=step, min=0, max=len(trace.snapshots) - 1, description="step", continuous_update=False
        )
        self.text, self.chart = widgets.HTML(), widgets.Image(format="png")
        self._figure = Figure(figsize=(10, 4.6), layout="constrained")
        self._axes = self._figure.subplots(2, 1, height_ratios=[3, 1.4])
        super().__init__([self.slider, self.text, self.chart])
        self.slider.observe(self.redraw, names="value")
        self.redraw()

    def redraw(self, _change=None) -> None:
        step = self.slider.value
        self.text.value = f"<pre>{format_trace(self.trace, first=step + 1).splitlines()[step + 1]}</pre>"
        for ax in self._axes:
            ax.clear()
        draw_timeline(self.trace, upto=step, ax=self._axes[0])
        draw_engine_blocks(self.trace, step, ax=self._axes[1])
        buffer = io.BytesIO()
        self._figure.savefig(buffer, format="png", dpi=80)
        self.chart.value = buffer.getvalue()

    def __repr__(self) -> str:
        # Short and deterministic: this is what GitHub and nbval see in place of the live widget.
        return f"EngineStepper({len(self.trace.snapshots)} steps; run the notebook to move the slider)"


def engine_stepper(trace: Trace, step: int = 0) -> EngineStepper:
    """A step slider over a traced run. Static fallback: `draw_timeline`, `draw_engine_blocks`, `format_trace`."""
    check_record("trace", trace, "a Trace (labkit.viz.serving.run_traced)", of=Trace)
    if not trace.snapshots:
        raise ValueError("The trace has no steps: add requests before running the engine.")
    return EngineStepper(trace, step)
