"""What serving a workload cost: a `RunResult` per way of serving it, and the table that compares them.

A run is measured from the client's side, as a user would feel it: each request's TTFT from its arrival
to its first token (so a request that waited in a queue shows that wait), its TPOT as the mean gap
between its later tokens, and the throughput as every request's tokens over the wall time of the whole
run. p50 is the typical request and p95 the unlucky one in twenty, so the table shows both. A padded
static batch also counts its wasted slots (`labkit.serving.static_batch.Waste`): rows fed padding, or
kept decoding after their own answer ended.

The run_* functions of `labkit.serving.workload` make these results.

    >>> result = RunResult("one at a time", wall_s=2.0, output_tokens=40, ttft_s=(0.1, 0.9),
    ...                    tpot_s=(0.05, 0.05), token_ids=((1,) * 20, (2,) * 20))
    >>> result.tokens_per_s, result.ttft_p50
    (20.0, 0.5)
    >>> print(results_table([result]))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.core.doors import check_items
from labkit.metrics import percentile
from labkit.serving.static_batch import Waste
from labkit.table import Column, format_table


@dataclass(frozen=True)
class RunResult:
    """What serving one workload cost, and what it produced. Times in seconds."""

    name: str  # how it was served
    wall_s: float  # run start -> last token of the last request
    output_tokens: int  # tokens generated, all requests
    ttft_s: tuple[float, ...]  # per request (workload order), from its arrival to its first token
    tpot_s: tuple[float, ...]  # per request with >= 2 tokens: mean gap between its later tokens
    token_ids: tuple[tuple[int, ...], ...]  # per request, in workload order
    waste: Waste | None = None  # padded static batches only: the slots they fed and wasted

    @property
    def tokens_per_s(self) -> float:
        """Total throughput: every request's tokens / the wall time of the whole run."""
        return self.output_tokens / self.wall_s

    @property
    def ttft_p50(self) -> float:
        return percentile(self.ttft_s, 50)

    @property
    def ttft_p95(self) -> float:
        return percentile(self.ttft_s, 95)

    @property
    def tpot_p50(self) -> float:
        return percentile(self.tpot_s, 50) if self.tpot_s else math.nan

    @property
    def tpot_p95(self) -> float:
        return percentile(self.tpot_s, 95) if self.tpot_s else math.nan


# results_table's columns after the runner's name, two spaces apart. The waste is "-" for a run that was not
# a padded static batch; "vs first" is a ratio written with its "x" ("2.00x").
RESULT_COLUMNS = [
    Column("requests", 8),
    Column("tokens/s", 8, ".1f"),
    Column("TTFT p50 ms", 11, ".0f"),
    Column("TTFT p95 ms", 11, ".0f"),
    Column("TPOT p50 ms", 11, ".1f"),
    Column("TPOT p95 ms", 11, ".1f"),
    Column("wall s", 6, ".2f"),
    Column("wasted", 6, ".0%"),
    Column("vs first", 8),
]


def results_table(results: list[RunResult]) -> str:
    """One row per run: requests, total tokens/s, TTFT and TPOT p50/p95, wall time, the share of slots a padded
    static batch wasted ('-' for the others), tokens/s vs the first row.

        >>> print(results_table([one_at_a_time, continuous]))
    """
    check_items("results", results, "RunResult (from the run_* functions)", of=RunResult)
    runner = Column("runner", max(len("runner"), *(len(r.name) for r in results)), align="<")
    rows = [result_cells(r, results[0]) for r in results]
    return format_table([runner, *RESULT_COLUMNS], rows, gap="  ")


def result_cells(result: RunResult, first: RunResult) -> list:
    """One run's cells, in the table's order: its name, then RESULT_COLUMNS'; times in ms but the wall."""
    wasted = result.waste.share if result.waste is not None else "-"
    latencies_s = [result.ttft_p50, result.ttft_p95, result.tpot_p50, result.tpot_p95]
    vs_first = f"{result.tokens_per_s / first.tokens_per_s:.2f}x"
    return [
        result.name,
        len(result.token_ids),
        result.tokens_per_s,
        *(seconds * 1e3 for seconds in latencies_s),
        result.wall_s,
        wasted,
        vs_first,
    ]
