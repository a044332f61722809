"""A load test from the client's side: streamed chat requests in a closed loop or arriving at a rate.

Closed loop (`load_test`): `concurrency` clients each send `requests_per_client` requests one after
another, like vLLM's `--max-concurrency` with all requests ready at once; a slow server slows its own load.
Open loop (`open_loop`): requests arrive at Poisson times of a given rate whatever the server's pace, as
independent users do (vLLM's `--request-rate`); past the server's capacity, its queue and TTFT grow.
Every answer is streamed and timed by `labkit.loadtest.client`. A level's throughput is every output
token over the wall time from the first request sent to the last token received; latencies are per
request, as percentiles; goodput counts the requests per second that met a latency target (`Target`).
The server's own means (TTFT and TPOT histograms on /metrics, read by `labkit.loadtest.metrics_page`)
are read before and after a level. Each level is a `LoadResult`; it, `Target` and the tables live in
`labkit.loadtest.load_result`.

    >>> results = await sweep(server.url, "smollm2-135m", [1, 4, 16], max_tokens=16)
    >>> print(sweep_table(results))
    >>> result = await open_loop(http, "smollm2-135m", rate=2.0, n_requests=16)
    >>> result.goodput(Target(ttft_s=1.0, tpot_s=0.15))
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Coroutine, Sequence

import httpx

from labkit.core.arguments import check_choice, check_int, check_text
from labkit.core.doors import check_callable, check_items, check_record
from labkit.loadtest.client import StreamTiming, stream_ollama, stream_openai
from labkit.loadtest.load_result import LoadResult
from labkit.loadtest.metrics_page import engine_summaries, mean_between
from labkit.serving.workload import QUESTIONS

TTFT, TPOT = "labkit_time_to_first_token_seconds", "labkit_time_per_output_token_seconds"
QUEUE = "labkit_request_queue_time_seconds"
QUESTION_STRIDE = 5  # request i asks QUESTIONS[5 i mod 16]: short and long prompts mixed at every level


def question(index: int, tag: str = "") -> list[dict]:
    """The chat of request `index`: one of notebook 10's 16 questions. With a tag, the question starts with
    "Request <tag>-<index>: ", so no server finds the whole prompt cached from an earlier level, while the
    chat template's default system prompt stays a prefix that every request shares, as in real traffic.

        >>> question(1)
        [{'role': 'user', 'content': 'What is photosynthesis?'}]
        >>> question(1, tag="b")
        [{'role': 'user', 'content': 'Request b-1: What is photosynthesis?'}]
    """
    text = QUESTIONS[(index * QUESTION_STRIDE) % len(QUESTIONS)]
    return [{"role": "user", "content": f"Request {tag}-{index}: {text}" if tag else text}]


async def load_test(
    http: httpx.AsyncClient,
    model: str,
    concurrency: int,
    requests_per_client: int = 2,
    max_tokens: int = 16,
    protocol: str = "openai",
    tag: str = "",
    chat: Callable[[int, str], list[dict]] = question,
    extra_body: dict | None = None,
) -> LoadResult:
    """`concurrency` clients, each streaming `requests_per_client` chat requests back to back (request i
    sends chat(i, tag): by default question(i, tag)); extra_body: fields added to every OpenAI request.

        >>> async with httpx.AsyncClient(base_url=server.url, timeout=600) as http:
        ...     result = await load_test(http, "smollm2-135m", concurrency=8)
        >>> result.tokens_per_s, result.quantile("ttft_s", 50)
    """
    for name, value in (
        ("concurrency", concurrency),
        ("requests_per_client", requests_per_client),
        ("max_tokens", max_tokens),
    ):
        check_int(name, value, minimum=1)
    if protocol not in ("openai", "ollama"):
        raise ValueError(f"protocol must be 'openai' or 'ollama', got {protocol!r}.")
    check_callable("chat", chat, "a function of (request index, tag) returning chat messages")
    if extra_body and protocol != "openai":
        raise ValueError(f"extra_body goes with the OpenAI protocol only, got protocol={protocol!r}.")

    def send(messages: list[dict]) -> Coroutine[None, None, StreamTiming]:
        if protocol == "ollama":
            return stream_ollama(http, model, messages, max_tokens)
        return stream_openai(http, model, messages, max_tokens, extra_body=extra_body)

    async def client(number: int) -> list[StreamTiming]:
        indices = range(number * requests_per_client, (number + 1) * requests_per_client)
        return [await send(chat(i, tag)) for i in indices]

    start = time.perf_counter()
    per_client = await asyncio.gather(*(client(n) for n in range(concurrency)))
    timings = [t for done in per_client for t in done]  # client n sent requests n k ... n k + k - 1
    ends = [t.sent_s + t.e2e_s for t in timings if not math.isnan(t.e2e_s)]
    wall = (max(ends) if ends else time.perf_counter()) - start
    return LoadResult(concurrency, tuple(timings), wall)


def poisson_arrivals(rate: float, n_requests: int, seed: int = 0) -> list[float]:
    """Arrival times in seconds: the first at 0, then gaps drawn from an exponential of mean 1/rate.

    >>> [round(t, 2) for t in poisson_arrivals(2.0, 3)]
    [0.0, 0.93, 1.64]
    """
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 < rate < math.inf:
        raise ValueError(f"rate must be a positive number of requests per second, got {rate!r}.")
    check_int("n_requests", n_requests, minimum=1)
    rng, times = random.Random(seed), [0.0]
    for _ in range(n_requests - 1):
        times.append(times[-1] + rng.expovariate(rate))
    return times


def open_loop(
    http: httpx.AsyncClient,
    model: str,
    rate: float,
    n_requests: int = 16,
    max_tokens: int = 16,
    seed: int = 0,
    tag: str = "",
) -> Coroutine[None, None, LoadResult]:
    """`n_requests` streamed chat requests sent at Poisson times of `rate` per second (seeded), each on its
    own, whether or not the earlier ones were answered. Request i asks question(i, tag). The arguments are
    checked at the call; await what it returns.

        >>> result = await open_loop(http, "smollm2-135m", rate=2.0, n_requests=16)
        >>> result.requests_per_s, result.quantile("ttft_s", 95)
    """
    check_record("http", http, "an httpx.AsyncClient with the server's base_url", of=httpx.AsyncClient)
    check_text("model", model, example="'smollm2-135m'")
    check_int("max_tokens", max_tokens, minimum=1)
    if not isinstance(tag, str):
        raise TypeError(
            f"tag must be a string that sets this run's questions apart, got {type(tag).__name__}."
        )
    return open_loop_requests(http, model, poisson_arrivals(rate, n_requests, seed), max_tokens, tag, rate)


async def open_loop_requests(
    http: httpx.AsyncClient, model: str, arrivals: list[float], max_tokens: int, tag: str, rate: float
) -> LoadResult:
    """open_loop's requests, sent at `arrivals` (seconds from now) and timed (its arguments already checked)."""
    n_requests, start = len(arrivals), time.perf_counter()

    async def arrive(index: int) -> StreamTiming:
        await asyncio.sleep(max(0.0, start + arrivals[index] - time.perf_counter()))
        return await stream_openai(http, model, question(index, tag), max_tokens)

    timings = await asyncio.gather(*(arrive(i) for i in range(n_requests)))
    ends = [t.sent_s + t.e2e_s for t in timings if not math.isnan(t.e2e_s)]
    wall = (max(ends) if ends else time.perf_counter()) - start
    return LoadResult(0, tuple(timings), wall, arrival_rate=float(rate))


async def measured_level(
    http: httpx.AsyncClient,
    model: str,
    concurrency: int,
    requests_per_client: int = 2,
    max_tokens: int = 16,
    protocol: str = "openai",
) -> LoadResult:
    """`load_test`, plus the server's own mean TTFT, TPOT and queue time over it (/metrics before and after).

    >>> result = await measured_level(http, "smollm2-135m", concurrency=16)
    >>> result.quantile("ttft_s", 50), result.engine_ttft_s    # the client's p50, the server's mean
    """
    before = engine_summaries((await http.get("/metrics")).text)
    result = await load_test(http, model, concurrency, requests_per_client, max_tokens, protocol)
    after = engine_summaries((await http.get("/metrics")).text)
    return LoadResult(
        result.concurrency,
        result.requests,
        result.wall_s,
        mean_between(before, after, TTFT),
        mean_between(before, after, TPOT),
        mean_between(before, after, QUEUE),
    )


def sweep(
    url: str,
    model: str,
    concurrencies: Sequence[int],
    requests_per_client: int = 2,
    max_tokens: int = 16,
    protocol: str = "openai",
    progress=None,
) -> Coroutine[None, None, list[LoadResult]]:
    """A `measured_level` at each concurrency, one after another; the arguments are checked at the call,
    await what it returns.

    progress: an optional callable given each finished LoadResult (e.g. to print a line).
    """
    check_text("url", url, example="'http://127.0.0.1:8000'")
    check_text("model", model, example="'smollm2-135m'")
    if not check_items("concurrencies", concurrencies, "client counts (int)", of=int):
        raise ValueError("concurrencies must hold at least one client count, such as [1, 4, 16].")
    for concurrency in concurrencies:
        check_int("concurrency", concurrency, minimum=1)
    check_int("requests_per_client", requests_per_client, minimum=1)
    check_int("max_tokens", max_tokens, minimum=1)
    check_choice("protocol", protocol, ("openai", "ollama"))
    if progress is not None:
        check_callable("progress", progress, "a function given each finished LoadResult, or None")
    return sweep_levels(url, model, concurrencies, requests_per_client, max_tokens, protocol, progress)


async def sweep_levels(
    url: str,
    model: str,
    concurrencies: Sequence[int],
    requests_per_client: int,
    max_tokens: int,
    protocol: str,
    progress,
) -> list[LoadResult]:
    """sweep's levels, measured one after another (its arguments already checked)."""
    limits = httpx.Limits(max_connections=max(concurrencies) + 4)
    results = []
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600, connect=10), limits=limits) as http:
        for concurrency in concurrencies:
            results.append(
                await measured_level(http, model, concurrency, requests_per_client, max_tokens, protocol)
            )
            if progress is not None:
                progress(results[-1])
    return results
