"""A long prompt arrives while short answers decode: what its prefill does to their token gaps.

Without chunks (prefill first), the engine gives the whole prompt one step of its own: every running
answer waits for that step, and its gap between two tokens becomes the prompt's whole prefill. With
chunked prefill (vLLM V1), every step decodes the running answers and feeds the prompt a chunk within
the token budget, so the longest gap is one mixed step, at the price of a later first token for the
long prompt. `interference_run` measures one way on the real clock; `interference_table` compares them.

    >>> runs = [interference_run(model, tokenizer, shorts, long_prompt, chunked) for chunked in (False, True)]
    >>> print(interference_table(runs))
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.doors import check_items, check_model
from labkit.metrics import percentile
from labkit.serving.engine import Engine
from labkit.table import Column, format_table


@dataclass(frozen=True)
class InterferenceRun:
    """One run: every step's kind, time and tokens fed; the short answers' token gaps; the long prompt's TTFT."""

    name: str
    step_kinds: tuple[str, ...]  # "prefill", "decode" or "mixed", per engine step
    step_ms: tuple[float, ...]  # each step's time
    step_tokens: tuple[int, ...]  # tokens each step fed
    gaps_ms: tuple[float, ...]  # between consecutive tokens of each short answer, all answers together
    long_ttft_ms: float  # from the long prompt's arrival to its first token
    arrival_step: int  # the step before which the long prompt arrived

    @property
    def longest_gap_ms(self) -> float:
        return max(self.gaps_ms)


def interference_run(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    short_prompts: list,
    long_prompt,
    chunked: bool,
    budget: int = 64,
    arrival_step: int = 4,
    max_new_tokens: int = 24,
) -> InterferenceRun:
    """Start the short prompts, add the long one before step `arrival_step`, step until all are done.

    chunked: chunked prefill with `budget` tokens per step; else prefill first (the default engine).

        >>> interference_run(model, tokenizer, ["Hi", "The sea"], "word " * 400, chunked=True).longest_gap_ms
    """
    check_model("model", model)
    check_items("short_prompts", short_prompts, "prompts (text or token ids)")
    options = {"chunked_prefill": True, "max_num_batched_tokens": budget} if chunked else {}
    engine = Engine(model, tokenizer, max_num_seqs=len(short_prompts) + 1, **options)
    shorts = [engine.add_request(prompt, max_new_tokens=max_new_tokens) for prompt in short_prompts]
    token_times: dict[int, list[float]] = {request_id: [] for request_id in shorts}
    long_id, step = None, 0
    while engine.has_unfinished():
        if step == arrival_step:
            long_id = engine.add_request(long_prompt, max_new_tokens=4)
        outputs = engine.step()
        now = time.perf_counter()
        for request_id, *_ in outputs:
            token_times.get(request_id, []).append(now)
        step += 1
    if long_id is None:
        raise ValueError(
            f"The short answers finished in {step} steps, before step {arrival_step}: ask for "
            "more max_new_tokens or an earlier arrival_step."
        )
    steps = list(engine.step_metrics)
    gaps = [(b - a) * 1e3 for times in token_times.values() for a, b in zip(times, times[1:])]
    name = f"chunked prefill, {budget} tokens a step" if chunked else "prefill first (no chunks)"
    return InterferenceRun(
        name,
        tuple(m.kind for m in steps),
        tuple(m.duration_s * 1e3 for m in steps),
        tuple(m.n_tokens for m in steps),
        tuple(gaps),
        engine.metrics(long_id).ttft_s * 1e3,
        arrival_step,
    )


# interference_table's columns after the run's name, two spaces apart: the short answers' gaps between
# tokens, the long prompt's TTFT (ms) and the engine steps the run took.
INTERFERENCE_COLUMNS = [
    Column("gap p50 ms", 10, ".0f"),
    Column("gap p95 ms", 10, ".0f"),
    Column("longest ms", 10, ".0f"),
    Column("long TTFT ms", 12, ".0f"),
    Column("steps", 5),
]


def interference_table(runs: list[InterferenceRun]) -> str:
    """One row per run: the short answers' gap between tokens (p50, p95, longest) and the long prompt's TTFT.

    >>> print(interference_table([without_chunks, with_chunks]))
    """
    check_items("runs", runs, "InterferenceRun (from interference_run)", of=InterferenceRun)
    engine = Column("engine", max(len(run.name) for run in runs), align="<")
    rows = [
        [
            run.name,
            percentile(run.gaps_ms, 50),
            percentile(run.gaps_ms, 95),
            run.longest_gap_ms,
            run.long_ttft_ms,
            len(run.step_ms),
        ]
        for run in runs
    ]
    return format_table([engine, *INTERFERENCE_COLUMNS], rows, gap="  ")
