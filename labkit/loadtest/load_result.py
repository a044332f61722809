"""What one level of a load test measured (`LoadResult`), the latency target it is judged by (`Target`),
and the tables that compare levels.

A level's throughput is every output token over its wall time, from the first request sent to the last
token received; its latencies are per request, as percentiles over the requests answered whole: TTFT
(sent -> first token), TPOT (the mean gap between later tokens) and E2E (sent -> last token). p50 is the
typical request and p95 the unlucky one in twenty. Goodput counts the requests per second that met a
target (DistServe's measure): throughput that no user waited too long for. The server reports its own
mean TTFT, TPOT and queue time on /metrics; set beside the client's, they say where a first token waited.
`labkit.loadtest.load` runs the levels and makes these results.

    >>> result = LoadResult(1, (timing,), wall_s=2.0)
    >>> result.tokens_per_s, result.goodput(Target(ttft_s=1.0, tpot_s=0.15))
    >>> print(sweep_table([result]))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from labkit.core.arguments import check_seconds
from labkit.core.doors import check_items
from labkit.loadtest.client import StreamTiming
from labkit.metrics import percentile
from labkit.table import Column, format_row, format_table


@dataclass(frozen=True)
class Target:
    """A latency target a request meets or not: its first token within `ttft_s`, then a token every `tpot_s`.

    >>> Target(ttft_s=1.0, tpot_s=0.15).describe()
    'TTFT <= 1000 ms and TPOT <= 150 ms'
    """

    ttft_s: float
    tpot_s: float

    def __post_init__(self):
        check_seconds("ttft_s", self.ttft_s)
        check_seconds("tpot_s", self.tpot_s)

    def met_by(self, timing: StreamTiming) -> bool:
        tpot_ok = math.isnan(timing.tpot_s) or timing.tpot_s <= self.tpot_s  # nan: a one-token answer
        return timing.ttft_s <= self.ttft_s and tpot_ok

    def describe(self) -> str:
        return f"TTFT <= {self.ttft_s * 1e3:.0f} ms and TPOT <= {self.tpot_s * 1e3:.0f} ms"


@dataclass(frozen=True)
class LoadResult:
    """One concurrency level: every request's timing, the wall time, and the server's own means."""

    concurrency: int  # requests in flight at once (clients)
    requests: tuple[StreamTiming, ...]  # by request index: request i asked question(i)
    wall_s: float  # first request sent -> last token received
    engine_ttft_s: float = math.nan  # the server's mean TTFT over this level (queue included), from /metrics
    engine_tpot_s: float = math.nan  # the server's mean TPOT over this level, from /metrics
    engine_queue_s: float = math.nan  # the server's mean wait for a seat over this level, from /metrics
    arrival_rate: float = math.nan  # open loop: requests arriving per second (nan for a closed loop)

    @property
    def ok(self) -> tuple[StreamTiming, ...]:
        """The requests that were answered whole (status 200, no error, some text)."""
        return tuple(r for r in self.requests if r.status == 200 and r.error is None and r.output_tokens > 0)

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.ok)

    @property
    def tokens_per_s(self) -> float:
        """Output tokens of every request / the level's wall time."""
        return self.output_tokens / self.wall_s

    @property
    def requests_per_s(self) -> float:
        return len(self.ok) / self.wall_s

    def quantile(self, metric: str, q: float) -> float:
        """The q-th percentile (0-100) of 'ttft_s', 'tpot_s' or 'e2e_s' over the answered requests."""
        values = [getattr(r, metric) for r in self.ok]
        values = [v for v in values if not math.isnan(v)]
        return percentile(values, q) if values else math.nan

    def goodput(self, target: Target) -> float:
        """Requests per second that were answered whole and met `target` (DistServe's goodput)."""
        return sum(target.met_by(r) for r in self.ok) / self.wall_s

    def mean(self, metric: str) -> float:
        values = [v for v in (getattr(r, metric) for r in self.ok) if not math.isnan(v)]
        return sum(values) / len(values) if values else math.nan


# The columns of sweep_table and ttft_breakdown, a space apart. A units line stands under the titles of the
# times; "vs first" is a ratio written with its "x" ("5.33x").
SWEEP_COLUMNS = [
    Column("clients", 7),
    Column("requests", 8),
    Column("tokens/s", 8, ".1f"),
    Column("vs first", 8),
    Column("TTFT p50", 8, ".0f"),
    Column("TTFT p95", 8, ".0f"),
    Column("TPOT p50", 8, ".0f"),
    Column("TPOT p95", 8, ".0f"),
    Column("E2E p50", 8, ".0f"),
    Column("E2E p95", 8, ".0f"),
    Column("srv TTFT", 8, ".0f"),
    Column("srv TPOT", 8, ".0f"),
    Column("errors", 6),
]
BREAKDOWN_COLUMNS = [
    Column("clients", 7),
    Column("queue", 8, ".0f"),
    Column("prefill+1st", 11, ".0f"),
    Column("HTTP path", 9, ".0f"),
    Column("client TTFT", 11, ".0f"),
]


def sweep_table(results: Sequence[LoadResult]) -> str:
    """One row per level: requests, tokens/s (and vs the first row), TTFT/TPOT/E2E percentiles in ms, the
    server's own mean TTFT and TPOT, errors."""
    check_items("results", results, "LoadResult (from sweep or open_loop)", of=LoadResult)
    rows = [sweep_cells(r, results[0]) for r in results]
    units = format_row(SWEEP_COLUMNS[:12], [""] * 4 + ["ms"] * 8, gap=" ")  # the line ends after the times
    titles, *lines = format_table(SWEEP_COLUMNS, rows, gap=" ").split("\n")
    return "\n".join([titles, units, *lines])


def sweep_cells(result: LoadResult, first: LoadResult) -> list:
    """One level's cells, in SWEEP_COLUMNS order; its tokens/s is also written as a ratio to `first`'s."""
    ms = [result.quantile(m, q) * 1e3 for m in ("ttft_s", "tpot_s", "e2e_s") for q in (50, 95)]
    ms += [result.engine_ttft_s * 1e3, result.engine_tpot_s * 1e3]
    vs_first = f"{result.tokens_per_s / first.tokens_per_s:.2f}x"
    errors = len(result.requests) - len(result.ok)
    return [result.concurrency, len(result.requests), result.tokens_per_s, vs_first, *ms, errors]


def ttft_breakdown(results: Sequence[LoadResult]) -> str:
    """Where a request's first token waited, level by level, as means in ms from both sides: the server's
    queue (arrival -> first scheduled), the server's prefill and first step (its TTFT minus the queue; the
    step in flight when it arrived included), and the HTTP path (the client's TTFT minus the server's: the
    way in before the handler stamps it, the way out after the engine emits the token).

        >>> print(ttft_breakdown(results))      # results from `sweep`
    """
    check_items("results", results, "LoadResult (from sweep)", of=LoadResult)
    rows = [ttft_cells(r) for r in results]
    units = format_row(BREAKDOWN_COLUMNS, [""] + ["ms (mean)"] * 4, gap=" ")
    titles, *lines = format_table(BREAKDOWN_COLUMNS, rows, gap=" ").split("\n")
    return "\n".join([titles, units, *lines])


def ttft_cells(result: LoadResult) -> list:
    """One level's cells, in BREAKDOWN_COLUMNS order: its clients, then the TTFT's parts and whole in ms."""
    client = result.mean("ttft_s")
    queue, engine_ttft = result.engine_queue_s, result.engine_ttft_s
    parts = [queue, engine_ttft - queue, client - engine_ttft, client]
    return [result.concurrency] + [part * 1e3 for part in parts]
