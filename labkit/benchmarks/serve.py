"""Serving over HTTP: labkit's server (float32 and its fastest weights) against llama-server and vLLM CPU.

SmolLM2-135M-Instruct behind four OpenAI-compatible servers, one running at a time on this machine, each
with the settings its row states (labkit.benchmarks.serve_servers). Every server gets the same streamed
chat requests, timed by the client: notebook 10's questions, each tagged with its level so that no whole
prompt repeats, behind the model's default system prompt that every request shares (each server caches
that prefix); greedy, at most 32 new tokens.

- closed loop: 1, 8 and 16 clients sending 16 requests in all, each the next when its last is answered;
- open loop: 16 requests arriving at Poisson times of 1, 2 and 4 per second, whatever the server's pace.

Throughput counts every output token over the wall time; TTFT and TPOT are per request, as percentiles;
goodput is the requests per second that met the latency target (TTFT and TPOT). Each level is the run with
the median tokens/s of `repeats`, the sweep repeated whole.

Aims: labkit's fastest server at least 1.0x vLLM CPU and 1.0x
llama-server in tokens/s at 8 and 16 clients, and in goodput at the highest rate where the best peer still
meets the target for 90 % of its requests; labkit float32 at 16 clients at least 4x one at a time.
"""

from __future__ import annotations

import asyncio
import sys

import httpx

from labkit.bench import comparison, machine_name
from labkit.benchmarks.serve_servers import Contender, contenders
from labkit.serving.http.load import LoadResult, Target, load_test, open_loop

N_REQUESTS, MAX_TOKENS = 16, 32
CLIENTS = (1, 8, 16)
RATES = (1.0, 2.0, 4.0)
TARGET = Target(ttft_s=1.0, tpot_s=0.15)  # an answer starts within a second, then outpaces reading
MET_SHARE = 0.9  # a server meets the target at a rate when 90 % of its requests do


def _progress(message: str) -> None:
    print(f"[serve] {message}", file=sys.stderr, flush=True)


def level_name(result: LoadResult) -> str:
    return f"{result.concurrency} clients" if result.concurrency else f"{result.arrival_rate:g} req/s"


async def sweep_once(url: str, model: str, clients: tuple[int, ...], rates: tuple[float, ...], n: int,
                     max_tokens: int, repeat: int) -> list[LoadResult]:
    """Every closed-loop level, then every open-loop rate, against the server at `url`. Each level's questions
    start with a tag of their own (labkit.serving.http.load.question): all three servers cache prefixes, and
    a level would otherwise find the previous level's whole prompts; the default system prompt before them
    is shared by every request, as in real traffic."""
    limits = httpx.Limits(max_connections=max(max(clients), n) + 4)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600, connect=10), limits=limits) as http:
        await load_test(http, model, concurrency=2, requests_per_client=1, max_tokens=4)  # warm-up, untimed
        results = [await load_test(http, model, c, max(n // c, 1), max_tokens, tag=f"{repeat}c{c}") for c in clients]
        results += [await open_loop(http, model, rate, n, max_tokens, tag=f"{repeat}r{rate:g}") for rate in rates]
    return results


def median_levels(runs: list[list[LoadResult]]) -> list[LoadResult]:
    """Level by level, the run with the median tokens/s (the upper middle one for an even count)."""
    return [sorted(level, key=lambda r: r.tokens_per_s)[len(level) // 2] for level in zip(*runs)]


def measure(contender: Contender, clients, rates, n: int, max_tokens: int, repeats: int) -> list[LoadResult]:
    with contender.start() as server:
        runs = []
        for repeat in range(repeats):
            runs.append(asyncio.run(sweep_once(server.url, contender.model, clients, rates, n, max_tokens, repeat)))
            _progress(f"{contender.name} {repeat + 1}/{repeats}: " + ", ".join(
                f"{level_name(r)} {r.tokens_per_s:.1f} tok/s" for r in runs[-1]))
    return median_levels(runs)


def table(results: dict[str, list[LoadResult]], target: Target) -> str:
    """One row per server and level: tokens/s, TTFT and TPOT p50/p95 (ms), goodput, share meeting the target."""
    header = (f"{'server':<24}{'level':>12}{'tok/s':>8}{'TTFT p50':>10}{'p95':>7}{'TPOT p50':>10}{'p95':>7}"
              f"{'goodput':>9}{'met':>6}{'errors':>8}")
    lines = [header, f"{'':<24}{'':>12}{'':>8}{'ms':>10}{'ms':>7}{'ms':>10}{'ms':>7}{'req/s':>9}"]
    for name, levels in results.items():
        for r in levels:
            ms = [r.quantile(m, q) * 1e3 for m in ("ttft_s", "tpot_s") for q in (50, 95)]
            lines.append(f"{name:<24}{level_name(r):>12}{r.tokens_per_s:>8.1f}{ms[0]:>10.0f}{ms[1]:>7.0f}"
                         f"{ms[2]:>10.0f}{ms[3]:>7.0f}{r.goodput(target):>9.2f}{met_share(r, target):>6.0%}"
                         f"{len(r.requests) - len(r.ok):>8}")
    return "\n".join(lines)


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


def record_tag(server: str) -> str:
    """A server's name as a record's name carries it: "vLLM CPU" -> "vLLM_CPU"."""
    return server.split(",")[0].replace(" ", "_").replace(".", "")


def aim_records(results: dict[str, list[LoadResult]], fastest: str, peers: list[str], clients, target) -> list[dict]:
    """labkit's fastest server against each peer: tokens/s at each closed level above 1, and goodput at the
    highest rate where the best peer meets the target."""
    records, mine = [], results[fastest]
    for peer in peers:
        tag = record_tag(peer)
        for c in (c for c in clients if c > 1):
            records.append(comparison(f"serve_fastest_vs_{tag}_clients{c}", "tokens_per_second",
                                      by_level(mine, c).tokens_per_s, by_level(results[peer], c).tokens_per_s,
                                      f"{peer}, {c} streamed clients, same requests"))
    best = max(peers, key=lambda p: highest_rate_met(results[p], target) or 0.0, default=None)
    rate = highest_rate_met(results[best], target) if best else None
    if rate is not None:
        records.append(comparison(f"serve_fastest_goodput_vs_{record_tag(best)}", "requests_per_second",
                                  by_level(mine, rate=rate).goodput(target), by_level(results[best], rate=rate).goodput(target),
                                  f"{best}, goodput at {rate:g} req/s ({target.describe()})"))
    return records


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    n, clients, rates, max_tokens, repeats = ((4, (1, 4), (4.0,), 4, 1) if quick
                                              else (N_REQUESTS, CLIENTS, RATES, MAX_TOKENS, repeats))
    servers = contenders(max(clients), quick)
    print(f"serve: SmolLM2-135M-Instruct, {n} streamed chat requests a level (OpenAI API), greedy, at most "
          f"{max_tokens} new tokens; closed loop at {', '.join(map(str, clients))} clients, open loop at "
          f"{', '.join(f'{r:g}' for r in rates)} req/s (Poisson); median of {repeats} by tokens/s\n"
          f"machine: {machine_name()}\ntarget: {TARGET.describe()}; servers, one at a time:")
    for server in servers:
        print(f"  {server.name}: {server.settings}")
    results = {server.name: measure(server, clients, rates, n, max_tokens, repeats) for server in servers
               if server.available}
    print("\n" + table(results, TARGET))
    for server in servers:
        if not server.available:
            print(f"{server.name}: skipped: {server.missing}")
    float32, fastest = servers[0].name, servers[1].name
    one, many = by_level(results[float32], clients[0]), by_level(results[float32], clients[-1])
    records = [comparison(f"serve_concurrency{clients[-1]}_vs_one_at_a_time", "tokens_per_second",
                          many.tokens_per_s, one.tokens_per_s, f"{float32}, {n} streamed chat requests")]
    errors = sum(len(r.requests) - len(r.ok) for levels in results.values() for r in levels)
    print(f"\n{float32}: {clients[-1]} clients vs one at a time: {records[0]['ratio']:.2f}x tokens/s (aim >= 4x)\n"
          f"every request answered whole: {'yes' if not errors else f'NO ({errors} failed)'}")
    peers = [s.name for s in servers[2:] if s.available]
    records += aim_records(results, fastest, peers, clients, TARGET)
    return records
