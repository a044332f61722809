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


def results_table(results: list[RunResult]) -> str:
    """One row per run: requests, total tokens/s, TTFT and TPOT p50/p95, wall time, the share of slots a padded
    static batch wasted ('-' for the others), tokens/s vs the first row.

        >>> print(results_table([one_at_a_time, continuous]))
    """
    check_items("results", results, "RunResult (from the run_* functions)", of=RunResult)
    width = max(len("runner"), *(len(r.name) for r in results))
    lines = [
        f"{'runner':<{width}}  {'requests':>8}  {'tokens/s':>8}  {'TTFT p50 ms':>11}  {'TTFT p95 ms':>11}  "
        f"{'TPOT p50 ms':>11}  {'TPOT p95 ms':>11}  {'wall s':>6}  {'wasted':>6}  {'vs first':>8}"
    ]
    for r in results:
        wasted = f"{r.waste.share:.0%}" if r.waste is not None else "-"
        lines.append(
            f"{r.name:<{width}}  {len(r.token_ids):>8}  {r.tokens_per_s:>8.1f}  {r.ttft_p50 * 1e3:>11.0f}  "
            f"{r.ttft_p95 * 1e3:>11.0f}  {r.tpot_p50 * 1e3:>11.1f}  {r.tpot_p95 * 1e3:>11.1f}  "
            f"{r.wall_s:>6.2f}  {wasted:>6}  {r.tokens_per_s / results[0].tokens_per_s:>7.2f}x"
        )
    return "\n".join(lines)
