"""Serving over HTTP: labkit's server with 16 concurrent streaming clients vs the same requests one at a time.

One server process (`python -m labkit serve`, SmolLM2-135M fp32, labkit's Llama, 16 seats) on 127.0.0.1.
The same 16 chat requests (notebook 10's questions, greedy, at most 32 new tokens each) are sent through
its OpenAI API (SSE, timed by the client as in notebook 11): one at a time, then by 16 clients at once.
Each row is the run with the median tokens/s of `repeats`, interleaved; throughput counts every output
token over the wall time. The answers of both ways are compared request by request.

Aims (notebook 11): at 16 clients at least 3x the tokens/s of one at a time, with the same answers.
"""

from __future__ import annotations

import asyncio
import sys

import httpx

from labkit.bench import comparison, machine_name
from labkit.serving.http.load import LoadResult, load_test, measured_level, sweep_table
from labkit.serving.http.server import start_server

MODEL = "smollm2-135m"
MANY_AT_ONCE = 8  # the engines benchmark's concurrency
ONE, MANY = "one at a time", "16 clients"


def _progress(message: str) -> None:
    print(f"[serve] {message}", file=sys.stderr, flush=True)


async def measure(url: str, n_requests: int, clients: int, max_tokens: int, repeats: int) -> dict[str, list[LoadResult]]:
    """Both ways `repeats` times, interleaved so that a noisy moment hits both."""
    runs: dict[str, list[LoadResult]] = {ONE: [], MANY: []}
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600, connect=10)) as http:
        await load_test(http, MODEL, concurrency=2, requests_per_client=1, max_tokens=4)  # warm-up, untimed
        for repeat in range(repeats):
            for name, concurrency in ((ONE, 1), (MANY, clients)):
                result = await measured_level(http, MODEL, concurrency, n_requests // concurrency, max_tokens)
                runs[name].append(result)
                _progress(f"{repeat + 1}/{repeats} {name}: {result.tokens_per_s:.1f} tokens/s")
    return runs


def median_run(runs: list[LoadResult]) -> LoadResult:
    """The run whose tokens/s is the median (the upper middle one for an even count)."""
    return sorted(runs, key=lambda r: r.tokens_per_s)[len(runs) // 2]


def differing(one: LoadResult, many: LoadResult) -> list[int]:
    """Indices of the requests whose answers differ between the two runs (greedy: there should be none)."""
    return [i for i, (a, b) in enumerate(zip(one.requests, many.requests)) if a.text != b.text]


def records(one: LoadResult, many: LoadResult, n: int) -> list[dict]:
    """Throughput and per-user TPOT at `many.concurrency` clients against one at a time."""
    what = f"the same {n} streamed chat requests sent one at a time through labkit's server"
    return [comparison(f"serve_concurrency{many.concurrency}_vs_one_at_a_time", "tokens_per_second",
                       many.tokens_per_s, one.tokens_per_s, what),
            comparison(f"serve_tpot_p50_concurrency{many.concurrency}", "seconds", many.quantile("tpot_s", 50),
                       one.quantile("tpot_s", 50), f"p50 TPOT, {what}")]


def peer_lines() -> list[str]:
    """Where the real engines' servers are measured: the `engines` benchmark starts each next to labkit's."""
    return [f"{name} row: see `python -m labkit.bench engines` ({MANY_AT_ONCE} requests at once through each "
            "server, one server running at a time)" for name in ("llama.cpp server", "vLLM CPU server")]


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    n, clients, max_tokens, repeats = (4, 4, 4, 1) if quick else (16, 16, 32, repeats)
    print(f"serve: SmolLM2-135M fp32 (labkit Llama) behind labkit's HTTP server ({clients} seats), {n} streamed "
          f"chat requests (OpenAI API), greedy, at most {max_tokens} new tokens, median of {repeats} by tokens/s")
    print(f"machine: {machine_name()}")
    with start_server(MODEL, max_num_seqs=clients) as server:
        runs = asyncio.run(measure(server.url, n, clients, max_tokens, repeats))
    one, many = median_run(runs[ONE]), median_run(runs[MANY])
    print("\n" + sweep_table([one, many]))
    print(f"\n{many.concurrency} clients vs one at a time: {many.tokens_per_s / one.tokens_per_s:.2f}x tokens/s "
          f"(aim >= 3x), p50 TPOT {many.quantile('tpot_s', 50) * 1e3:.0f} ms vs {one.quantile('tpot_s', 50) * 1e3:.0f} "
          f"ms (each user's tokens come more slowly)")
    errors = sum(len(r.requests) - len(r.ok) for found in runs.values() for r in found)
    differ = differing(one, many)
    print(f"every request answered whole: {'yes' if not errors else f'NO ({errors} failed)'}; answers the same "
          f"both ways: {'yes' if not differ else f'NO (requests {differ})'}")
    for line in peer_lines():
        print(line)
    return records(one, many, n)
