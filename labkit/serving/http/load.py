"""A load test from the client's side: asyncio clients streaming chat requests at a fixed concurrency.

`concurrency` clients each send `requests_per_client` requests one after another (a closed loop, like
vLLM's `--max-concurrency` with all requests ready at once), every answer streamed and timed by
`labkit.serving.http.client`. A level's throughput is every output token over the wall time from the
first request sent to the last token received; latencies are per request, as percentiles. The
server's own means (TTFT and TPOT histograms on /metrics) are read before and after each level.

    >>> results = await sweep(server.url, "smollm2-135m", [1, 4, 16], max_tokens=16)
    >>> print(sweep_table(results))
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from labkit.metrics import percentile
from labkit.serving.http.client import (StreamTiming, engine_summaries, mean_between, stream_ollama,
                                        stream_openai)
from labkit.serving.workload import QUESTIONS

TTFT, TPOT = "labkit_time_to_first_token_seconds", "labkit_time_per_output_token_seconds"
QUESTION_STRIDE = 5  # request i asks QUESTIONS[5 i mod 16]: short and long prompts mixed at every level


@dataclass(frozen=True)
class LoadResult:
    """One concurrency level: every request's timing, the wall time, and the server's own means."""

    concurrency: int  # requests in flight at once (clients)
    requests: tuple[StreamTiming, ...]  # by request index: request i asked question(i)
    wall_s: float  # first request sent -> last token received
    engine_ttft_s: float = math.nan  # the server's mean TTFT over this level (queue included), from /metrics
    engine_tpot_s: float = math.nan  # the server's mean TPOT over this level, from /metrics

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

    def mean(self, metric: str) -> float:
        values = [v for v in (getattr(r, metric) for r in self.ok) if not math.isnan(v)]
        return sum(values) / len(values) if values else math.nan


def question(index: int) -> list[dict]:
    """The chat of request `index`: one of notebook 10's 16 questions.

        >>> question(1)
        [{'role': 'user', 'content': 'What is photosynthesis?'}]
    """
    return [{"role": "user", "content": QUESTIONS[(index * QUESTION_STRIDE) % len(QUESTIONS)]}]


async def load_test(http: httpx.AsyncClient, model: str, concurrency: int, requests_per_client: int = 2,
                    max_tokens: int = 16, protocol: str = "openai") -> LoadResult:
    """`concurrency` clients, each streaming `requests_per_client` chat requests back to back.

        >>> async with httpx.AsyncClient(base_url=server.url, timeout=600) as http:
        ...     result = await load_test(http, "smollm2-135m", concurrency=8)
        >>> result.tokens_per_s, result.quantile("ttft_s", 50)
    """
    if not isinstance(concurrency, int) or concurrency < 1 or requests_per_client < 1 or max_tokens < 1:
        raise ValueError(f"Need concurrency >= 1, requests_per_client >= 1 and max_tokens >= 1, got "
                         f"{concurrency!r}, {requests_per_client!r}, {max_tokens!r}.")
    if protocol not in ("openai", "ollama"):
        raise ValueError(f"protocol must be 'openai' or 'ollama', got {protocol!r}.")
    send = stream_openai if protocol == "openai" else stream_ollama

    async def client(number: int) -> list[StreamTiming]:
        indices = range(number * requests_per_client, (number + 1) * requests_per_client)
        return [await send(http, model, question(i), max_tokens) for i in indices]

    start = time.perf_counter()
    per_client = await asyncio.gather(*(client(n) for n in range(concurrency)))
    timings = [t for done in per_client for t in done]  # client n sent requests n k ... n k + k - 1
    ends = [t.sent_s + t.e2e_s for t in timings if not math.isnan(t.e2e_s)]
    wall = (max(ends) if ends else time.perf_counter()) - start
    return LoadResult(concurrency, tuple(timings), wall)


async def measured_level(http: httpx.AsyncClient, model: str, concurrency: int, requests_per_client: int = 2,
                         max_tokens: int = 16, protocol: str = "openai") -> LoadResult:
    """`load_test`, plus the server's own mean TTFT and TPOT over it (its /metrics read before and after).

        >>> result = await measured_level(http, "smollm2-135m", concurrency=16)
        >>> result.quantile("ttft_s", 50), result.engine_ttft_s    # the client's p50, the server's mean
    """
    before = engine_summaries((await http.get("/metrics")).text)
    result = await load_test(http, model, concurrency, requests_per_client, max_tokens, protocol)
    after = engine_summaries((await http.get("/metrics")).text)
    return LoadResult(result.concurrency, result.requests, result.wall_s, mean_between(before, after, TTFT),
                      mean_between(before, after, TPOT))


async def sweep(url: str, model: str, concurrencies: Sequence[int], requests_per_client: int = 2,
                max_tokens: int = 16, protocol: str = "openai", progress=None) -> list[LoadResult]:
    """A `measured_level` at each concurrency, one after another.

    progress: an optional callable given each finished LoadResult (e.g. to print a line).
    """
    limits = httpx.Limits(max_connections=max(concurrencies) + 4)
    results = []
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600, connect=10), limits=limits) as http:
        for concurrency in concurrencies:
            results.append(await measured_level(http, model, concurrency, requests_per_client, max_tokens, protocol))
            if progress is not None:
                progress(results[-1])
    return results


def sweep_table(results: Sequence[LoadResult]) -> str:
    """One row per level: requests, tokens/s (and vs the first row), TTFT/TPOT/E2E percentiles in ms, the
    server's own mean TTFT and TPOT, errors."""
    header = (f"{'clients':>7} {'requests':>8} {'tokens/s':>8} {'vs first':>8} {'TTFT p50':>8} {'TTFT p95':>8} "
              f"{'TPOT p50':>8} {'TPOT p95':>8} {'E2E p50':>8} {'E2E p95':>8} {'srv TTFT':>8} {'srv TPOT':>8} "
              f"{'errors':>6}")
    lines = [header, f"{'':>7} {'':>8} {'':>8} {'':>8} " + " ".join(f"{'ms':>8}" for _ in range(8))]
    for r in results:
        ms = [r.quantile(m, q) * 1e3 for m in ("ttft_s", "tpot_s", "e2e_s") for q in (50, 95)]
        ms += [r.engine_ttft_s * 1e3, r.engine_tpot_s * 1e3]
        lines.append(f"{r.concurrency:>7} {len(r.requests):>8} {r.tokens_per_s:>8.1f} "
                     f"{r.tokens_per_s / results[0].tokens_per_s:>7.2f}x " + " ".join(f"{v:>8.0f}" for v in ms)
                     + f" {len(r.requests) - len(r.ok):>6}")
    return "\n".join(lines)
