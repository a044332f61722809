"""Serving over HTTP: labkit's server (float32 and its fastest weights) against llama-server and vLLM CPU.

SmolLM2-135M-Instruct behind four OpenAI-compatible servers, one running at a time on this machine, each
with the settings its row states (labkit.benchmarks.serve_servers). Every server gets the same streamed
chat requests, timed by the client: notebook 10's questions, each tagged with its level so that no whole
prompt repeats, behind the model's default system prompt that every request shares (each server caches
that prefix); greedy, at most 32 new tokens.

- closed loop: 1, 2, 8 and 16 clients sending 16 requests in all, each the next when its last is answered;
- open loop: 16 requests arriving at Poisson times of 1, 2 and 4 per second, whatever the server's pace.

Throughput counts every output token over the wall time; TTFT and TPOT are per request, as percentiles;
goodput is the requests per second that met the latency target (TTFT and TPOT). Each level is the run with
the median tokens/s of `repeats`, the sweep repeated whole.

Records, like with like: labkit's fastest server (Q4_1 weights) against llama-server (Q4_1) and labkit
float32 against vLLM CPU (float32, the better of its two thread settings at each level), in tokens/s at
every closed-loop level and in goodput at every rate; labkit's fastest against vLLM as well (the peers'
weights differ there: the record's peer name says float32). Aims: labkit's fastest at least 1.0x each peer
at every level; labkit float32 at 16 clients at least 4x one at a time.

The last full run (idle 2-core AMD EPYC with AVX-512, medians of 3; vLLM with tcmalloc and Intel OpenMP
preloaded, as its docs ask), after labkit's compiled decode step began to attend over the pool in place
(labkit::paged_row_attention, no copy of every layer's past keys): labkit's fastest ran 117.2 / 139.6 /
335.2 / 442.8 tokens/s at 1 / 2 / 8 / 16 clients, 1.19x / 1.36x / 2.53x / 3.36x llama-server and 2.88x /
2.09x / 1.96x / 1.76x vLLM's best, with the lowest TTFT p95 of all five servers at every level (49 / 79 /
150 / 246 ms against the lowest peer's 77 / 128 / 329 / 643); goodput 0.995x / 0.999x / 1.06x llama-server
at 1 / 2 / 4 requests a second (every request of both met the target at 1 and 2). labkit float32 ran
1.01x / 1.01x / 1.07x / 1.12x vLLM float32 on all cores (41.0 against 40.7 tokens/s at 1 client, 280.9
against 251.3 at 16); goodput 0.995x / 0.99x / 0.98x. The run before, gathering the past keys into a copy
each step, on a slower day of the same machine (llama-server 87.2 against 98.9 tokens/s at 1 client):
labkit float32 0.83x-0.88x vLLM's best, labkit's fastest 353.3 tokens/s at 16 clients.
"""

from __future__ import annotations

import asyncio

import httpx

from labkit.benchmarks.comparison import comparison
from labkit.benchmarks.progress import progress
from labkit.benchmarks.serve_servers import LLAMA_SERVER, VLLMS, Contender, contenders, record_tag
from labkit.loadtest.load import load_test, open_loop
from labkit.loadtest.load_result import LoadResult, Target
from labkit.table import Column, format_row, format_table
from labkit.this_machine import machine_name

N_REQUESTS, MAX_TOKENS = 16, 32
CLIENTS = (1, 2, 8, 16)
RATES = (1.0, 2.0, 4.0)
TARGET = Target(ttft_s=1.0, tpot_s=0.15)  # an answer starts within a second, then outpaces reading
MET_SHARE = 0.9  # a server meets the target at a rate when 90 % of its requests do
COLUMNS = [
    Column("server", 24, align="<"),
    Column("level", 12),
    Column("tok/s", 8, ".1f"),
    Column("TTFT p50", 10, ".0f"),
    Column("p95", 7, ".0f"),
    Column("TPOT p50", 10, ".0f"),
    Column("p95", 7, ".0f"),
    Column("goodput", 9, ".2f"),
    Column("met", 6, ".0%"),
    Column("errors", 8),
]
UNITS = ["", "", "", "ms", "ms", "ms", "ms", "req/s"]  # the line under the titles, up to the last unit


def level_name(result: LoadResult) -> str:
    return f"{result.concurrency} clients" if result.concurrency else f"{result.arrival_rate:g} req/s"


async def sweep_once(
    url: str,
    model: str,
    clients: tuple[int, ...],
    rates: tuple[float, ...],
    n: int,
    max_tokens: int,
    repeat: int,
) -> list[LoadResult]:
    """Every closed-loop level, then every open-loop rate, against the server at `url`. Each level's questions
    start with a tag of their own (labkit.loadtest.load.question): all three servers cache prefixes, and
    a level would otherwise find the previous level's whole prompts; the default system prompt before them
    is shared by every request, as in real traffic."""
    limits = httpx.Limits(max_connections=max(max(clients), n) + 4)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600, connect=10), limits=limits) as http:
        await load_test(http, model, concurrency=2, requests_per_client=1, max_tokens=4)  # warm-up, untimed
        results = [
            await load_test(http, model, c, max(n // c, 1), max_tokens, tag=f"{repeat}c{c}") for c in clients
        ]
        results += [
            await open_loop(http, model, rate, n, max_tokens, tag=f"{repeat}r{rate:g}") for rate in rates
        ]
    return results


def median_levels(runs: list[list[LoadResult]]) -> list[LoadResult]:
    """Level by level, the run with the median tokens/s (the upper middle one for an even count)."""
    return [sorted(level, key=lambda r: r.tokens_per_s)[len(level) // 2] for level in zip(*runs)]


def measure(contender: Contender, clients, rates, n: int, max_tokens: int, repeats: int) -> list[LoadResult]:
    with contender.start() as server:
        runs = []
        for repeat in range(repeats):
            runs.append(
                asyncio.run(sweep_once(server.url, contender.model, clients, rates, n, max_tokens, repeat))
            )
            progress(
                "serve",
                f"{contender.name} {repeat + 1}/{repeats}: "
                + ", ".join(f"{level_name(r)} {r.tokens_per_s:.1f} tok/s" for r in runs[-1]),
            )
    return median_levels(runs)


def table_row(name: str, result: LoadResult, target: Target) -> list:
    """One server at one level, a cell per column of COLUMNS (times in ms)."""
    ms = [result.quantile(metric, q) * 1e3 for metric in ("ttft_s", "tpot_s") for q in (50, 95)]
    return [
        name,
        level_name(result),
        result.tokens_per_s,
        *ms,
        result.goodput(target),
        met_share(result, target),
        len(result.requests) - len(result.ok),
    ]


def table(results: dict[str, list[LoadResult]], target: Target) -> str:
    """One row per server and level: tokens/s, TTFT and TPOT p50/p95 (ms), goodput, share meeting the target;
    under the titles, a line of units.

        >>> print(table({"labkit server, float32": [result]}, TARGET))
        server                         level   tok/s  TTFT p50    p95  TPOT p50    p95  goodput   met  errors
                                                            ms     ms        ms     ms    req/s
        labkit server, float32     1 clients    60.0       200    200        50     50    12.00  100%       0
    """
    rows = [table_row(name, result, target) for name, levels in results.items() for result in levels]
    units = format_row(COLUMNS[: len(UNITS)], UNITS)
    return "\n".join([format_table(COLUMNS, []), units] + [format_row(COLUMNS, row) for row in rows])


def met_share(result: LoadResult, target: Target) -> float:
    """The share of all requests sent that were answered whole within the target."""
    return sum(target.met_by(r) for r in result.ok) / len(result.requests)


def by_level(levels: list[LoadResult], concurrency: int = 0, rate: float | None = None) -> LoadResult | None:
    found = [r for r in levels if (r.concurrency == concurrency if rate is None else r.arrival_rate == rate)]
    return found[0] if found else None


def highest_rate_met(levels: list[LoadResult], target: Target) -> float | None:
    """The highest open-loop rate at which MET_SHARE of the requests met the target (None if none did)."""
    met = [r.arrival_rate for r in levels if r.concurrency == 0 and met_share(r, target) >= MET_SHARE]
    return max(met) if met else None


def best_peer(
    results: dict[str, list[LoadResult]], peers: tuple[str, ...], level: LoadResult, score
) -> tuple[str, LoadResult] | None:
    """Among `peers` (one engine at several settings), the one whose run at `level`'s level scores highest."""
    found = [
        (peer, by_level(results[peer], level.concurrency, None if level.concurrency else level.arrival_rate))
        for peer in peers
        if peer in results
    ]
    found = [(peer, run) for peer, run in found if run is not None]
    return max(found, key=lambda pair: score(pair[1]), default=None)


def aim_records(
    results: dict[str, list[LoadResult]], pairs: list[tuple[str, tuple[str, ...]]], target: Target
) -> list[dict]:
    """For each (labkit server, peers): at every closed-loop level its tokens/s against the best of the peers
    there (one engine at its settings: the better one is kept), and at every rate its goodput against theirs
    (left out where no peer request met the target: no ratio to a zero)."""
    records = []
    for mine, peers in pairs:
        for level in results.get(mine, []):
            rate = level.concurrency == 0
            score = (lambda r: r.goodput(target)) if rate else (lambda r: r.tokens_per_s)
            best = best_peer(results, peers, level, score)
            if best is None or (rate and score(best[1]) == 0):
                continue
            peer, theirs = best
            where = f"rate{level.arrival_rate:g}" if rate else f"clients{level.concurrency}"
            records.append(
                comparison(
                    f"serve_{record_tag(mine)}_{'goodput_' if rate else ''}vs_{record_tag(peer)}_{where}",
                    "requests_per_second" if rate else "tokens_per_second",
                    score(level),
                    score(theirs),
                    f"{peer}, "
                    + (
                        f"goodput at {level.arrival_rate:g} req/s ({target.describe()})"
                        if rate
                        else f"{level.concurrency} streamed clients, same requests"
                    ),
                )
            )
    return records


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    n, clients, rates, max_tokens, repeats = (
        (4, (1, 4), (4.0,), 4, 1) if quick else (N_REQUESTS, CLIENTS, RATES, MAX_TOKENS, repeats)
    )
    servers = contenders(max(clients), quick)
    print(
        f"serve: SmolLM2-135M-Instruct, {n} streamed chat requests a level (OpenAI API), greedy, at most "
        f"{max_tokens} new tokens; closed loop at {', '.join(map(str, clients))} clients, open loop at "
        f"{', '.join(f'{r:g}' for r in rates)} req/s (Poisson); median of {repeats} by tokens/s\n"
        f"machine: {machine_name()}\ntarget: {TARGET.describe()}; servers, one at a time:"
    )
    for server in servers:
        print(f"  {server.name}: {server.settings}")
    results = {
        server.name: measure(server, clients, rates, n, max_tokens, repeats)
        for server in servers
        if server.available
    }
    print("\n" + table(results, TARGET))
    for server in servers:
        if not server.available:
            print(f"{server.name}: skipped: {server.missing}")
    float32, fastest = servers[0].name, servers[1].name
    one, many = by_level(results[float32], clients[0]), by_level(results[float32], clients[-1])
    records = [
        comparison(
            f"serve_concurrency{clients[-1]}_vs_one_at_a_time",
            "tokens_per_second",
            many.tokens_per_s,
            one.tokens_per_s,
            f"{float32}, {n} streamed chat requests",
        )
    ]
    errors = sum(len(r.requests) - len(r.ok) for levels in results.values() for r in levels)
    print(
        f"\n{float32}: {clients[-1]} clients vs one at a time: {records[0]['ratio']:.2f}x tokens/s (aim >= 4x)\n"
        f"every request answered whole: {'yes' if not errors else f'NO ({errors} failed)'}"
    )
    records += aim_records(results, [(fastest, (LLAMA_SERVER,)), (fastest, VLLMS), (float32, VLLMS)], TARGET)
    return records
