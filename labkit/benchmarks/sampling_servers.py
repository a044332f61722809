"""n samples of one prompt through servers: one request with OpenAI's `n` against n parallel requests of it.

The part of `python -m labkit.bench sampling` that runs the peers. Each server of `bench serve`
(labkit.benchmarks.serve_servers: labkit float32 and its fastest, llama-server, vLLM CPU, each at its best
settings, `n` seats or slots) runs alone and gets the same long prompt on `/v1/completions`, sampled at
temperature 0.8, in two ways, interleaved over the repeats:
- one request with `n` (seed s): the server may prefill once and share the prompt's KV cache between the
  samples (labkit's engine and vLLM fork the prompt's blocks; llama-server copies the prompt's cache into
  each slot);
- n requests of the same prompt sent at once, seeds s, s+1, ...: each server's prefix cache may find the
  prompt only where one request's prefill finished before the others were scheduled.

Tokens are counted the same way for every server, from the answers: a choice cut at `max_tokens` made
max_tokens tokens, one that stopped made its text's tokens plus the stop token (the servers' own usage
is not used: llama-server 0.3.36 counts one choice's tokens under `n`). Wall time is the client's, from
sending to the last answer.

    >>> rows = measure_servers(prompt_text, n=8, max_tokens=32, repeats=3)
    >>> print(server_table(rows))
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

import httpx

from labkit.benchmarks.comparison import comparison
from labkit.benchmarks.progress import progress
from labkit.benchmarks.serve_servers import (
    FASTEST_LABKIT,
    LABKIT_FLOAT32,
    LLAMA_SERVER,
    VLLMS,
    Contender,
    contenders,
    record_tag,
)

SEED = 0
ONE_REQUEST, PARALLEL = "one request, n", "n parallel requests"


@dataclass(frozen=True)
class ServerSampling:
    """One way of asking a server for n samples: tokens/s per repeat (median reported), or why it failed."""

    server: str
    way: str
    rates: tuple[float, ...] = ()
    error: str = ""

    @property
    def tokens_per_s(self) -> float:
        return statistics.median(self.rates) if self.rates else float("nan")

    def way_name(self, n: int) -> str:
        return f"1 request, n={n}" if self.way == ONE_REQUEST else f"{n} parallel requests"

    def describe(self, n: int) -> str:
        way = self.way_name(n)
        if self.error:
            return f"{self.server:<26}{way:<22}refused: {self.error}"
        return (
            f"{self.server:<26}{way:<22}{self.tokens_per_s:>8.1f} tok/s"
            f"  (range {min(self.rates):.1f}-{max(self.rates):.1f})"
        )


def choice_tokens(choice: dict, max_tokens: int, tokenizer) -> int:
    """The tokens one completion choice made: max_tokens if cut there, else its text's tokens + the stop token."""
    if choice.get("finish_reason") == "length":
        return max_tokens
    return len(tokenizer(choice["text"], add_special_tokens=False)["input_ids"]) + 1


async def ask(
    http: httpx.AsyncClient, model: str, prompt: str, n: int, max_tokens: int, seed: int
) -> list[dict]:
    """One /v1/completions request for `n` samples; its choices (raises on an error answer)."""
    body = {
        "model": model,
        "prompt": prompt,
        "n": n,
        "max_tokens": max_tokens,
        "temperature": 0.8,
        "seed": seed,
    }
    response = await http.post("/v1/completions", json=body)
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code}: {response.text[:160]}")
    choices = response.json()["choices"]
    if len(choices) != n:
        raise RuntimeError(f"asked for {n} choices, got {len(choices)}")
    return choices


async def timed_way(http, model: str, way: str, prompt: str, n: int, max_tokens: int, tokenizer) -> float:
    """Tokens/s of one way of asking for n samples: the choices' tokens over the client's wall time."""
    start = time.perf_counter()
    if way == ONE_REQUEST:
        choices = await ask(http, model, prompt, n, max_tokens, SEED)
    else:
        answers = await asyncio.gather(*(ask(http, model, prompt, 1, max_tokens, SEED + i) for i in range(n)))
        choices = [choice for answer in answers for choice in answer]
    wall = time.perf_counter() - start
    return sum(choice_tokens(c, max_tokens, tokenizer) for c in choices) / wall


async def measure_one(
    url: str,
    contender: Contender,
    prompt: str,
    n: int,
    max_tokens: int,
    repeats: int,
    tokenizer,
    warm_up: bool = True,
) -> list[ServerSampling]:
    """Both ways against one running server, after one untimed request of each; a refused way says why.
    warm_up False (--quick): that first request of each way is its first timed repeat."""
    rates: dict[str, list[float]] = {ONE_REQUEST: [], PARALLEL: []}
    errors: dict[str, str] = {}
    async with httpx.AsyncClient(
        base_url=url, timeout=httpx.Timeout(600, connect=10), limits=httpx.Limits(max_connections=n + 4)
    ) as http:
        for way in rates:  # warm-up, and the check that the server accepts the way at all
            try:
                rate = await timed_way(http, contender.model, way, prompt, n, max_tokens, tokenizer)
            except RuntimeError as error:
                errors[way] = str(error)
                continue
            if not warm_up:
                rates[way].append(rate)
        for _ in range(repeats if warm_up else repeats - 1):
            for way in (w for w in rates if w not in errors):
                rates[way].append(
                    await timed_way(http, contender.model, way, prompt, n, max_tokens, tokenizer)
                )
    return [ServerSampling(contender.name, way, tuple(rates[way]), errors.get(way, "")) for way in rates]


def measure_servers(
    prompt: str, tokenizer, n: int, max_tokens: int, repeats: int, quick: bool = False
) -> tuple[list[Contender], list[ServerSampling]]:
    """Every available server of `bench serve` with n seats, one at a time: both ways, `repeats` times each
    (quick: with no untimed warm-up request)."""
    servers = contenders(seats=n, quick=quick)
    rows: list[ServerSampling] = []
    for contender in (server for server in servers if server.available):
        progress("sampling", f"{contender.name}: starting")
        with contender.start() as server:
            rows += asyncio.run(
                measure_one(
                    server.url, contender, prompt, n, max_tokens, repeats, tokenizer, warm_up=not quick
                )
            )
    return servers, rows


def server_table(rows: list[ServerSampling], n: int) -> str:
    """One line per server and way: median tokens/s and the range over the repeats, or the refusal."""
    return "\n".join(row.describe(n) for row in rows)


def find(rows: list[ServerSampling], server: str, way: str) -> ServerSampling | None:
    found = [row for row in rows if row.server == server and row.way == way and not row.error]
    return found[0] if found else None


# labkit's server against the peer that reads the same weights' precision: float32 against vLLM CPU's float32,
# the fastest (Q4_1 on labkit's kernel) against llama-server's Q4_1.
LIKE_WITH_LIKE = {FASTEST_LABKIT: (LLAMA_SERVER,), LABKIT_FLOAT32: VLLMS}  # vLLM: at either thread setting


def server_records(rows: list[ServerSampling], n: int) -> list[dict]:
    """labkit's server with n in one request against its own n parallel requests, and against the peer's
    fastest way (one request with n or n parallel requests, at any of its settings), like with like."""
    records = []
    for mine, peers in LIKE_WITH_LIKE.items():
        shared = find(rows, mine, ONE_REQUEST)
        if shared is None:
            continue
        parallel = find(rows, mine, PARALLEL)
        if parallel is not None:
            records.append(
                comparison(
                    f"sampling_server_{record_tag(mine)}_n{n}_vs_parallel_requests",
                    "tokens_per_second",
                    shared.tokens_per_s,
                    parallel.tokens_per_s,
                    f"{mine}, {n} parallel requests",
                )
            )
        ways = [row for peer in peers for way in (ONE_REQUEST, PARALLEL) if (row := find(rows, peer, way))]
        if ways:
            best = max(ways, key=lambda row: row.tokens_per_s)
            records.append(
                comparison(
                    f"sampling_server_{record_tag(mine)}_n{n}_vs_{record_tag(peers[0])}",
                    "tokens_per_second",
                    shared.tokens_per_s,
                    best.tokens_per_s,
                    f"{best.server}, {best.way_name(n)}",
                )
            )
    return records
