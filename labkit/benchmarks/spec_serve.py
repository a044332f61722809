"""Speculation under load: labkit's server with and without prompt-lookup drafts, beside llama-server's n-gram.

SmolLM2-135M-Instruct behind labkit's server (fused projections, Q4_1 weights, started with
`--speculative-tokens 4`) and llama-server (the same weights' Q4_1 GGUF), one server at a time. Two
workloads of greedy streamed chats (labkit.serving.spec_load's, notebook 09's), each request with a system
line of its own, so no server finds a whole prompt cached:

- copy: repeat or lightly edit a given paragraph: the answer is in the prompt, so drafts looked up there
  are often right (editing and quoting, as a coding assistant does);
- free: a short story: little of the answer is in the prompt, so drafts are rare and mostly wrong.

At 1, 2, 8 and 16 clients in a closed loop, labkit's server runs each level twice in a row, with drafts
(each request's draft length adapted to its acceptance and to the batch's step cost) and without
(`speculative.n_max: 0`, llama-server's per-request field); llama-server runs as two processes, without
speculation and with its `ngram-simple` drafts at the better of two lookup settings. Each row is the median
of `repeats` by tokens/s; the drafted and accepted counts are the servers' own (each answer's `timings`).
Before timing, each labkit request is answered with and without drafts: greedy, the two must be equal. On
an eager server (the quick run's) they always are; on a compiled one they may differ by rounding where a
drafted step runs eager (a batch where padding every row to the draft width would cost more than the
eager step, labkit.serving.compiled_step.worth_padding), since the compiled steps round differently from
the eager ones. Measured on a 2-core Intel Xeon (fuse+q4_1, compiled, 16 copy and 16 free chats of 64
tokens): 0 of 32 differed once drafted steps ran compiled; when every drafted step ran eager, the
compiled engine's plain answers already differed from the eager engine's in 4 of 8 48-token chats.

The last full run, on a 2-core AMD EPYC with AVX-512 (idle, median of 3 by tokens/s), after the compiled
decode step began to attend over the pool in place (labkit::paged_row_attention) and the speculator's cost
fit moved to plain floats: labkit with drafts against without, at 1 / 2 / 8 / 16 clients, copy 2.14x /
1.87x / 1.20x / 1.05x (89-90 % of drafts kept), free 1.04x / 0.93x / 0.95x / 1.03x, where it drafted 118,
28, 39 and 10 tokens in all (28-41 % kept); at 1 client on copies 280.4 tokens/s against llama-server's
best speculation (ngram-simple n=3) 116.2, 2.41x. labkit without drafts ran 1.62x / 2.45x / 3.22x / 3.77x
llama-server without on copies, 1.19x / 2.31x / 2.70x / 2.89x on free text. The run before it, with paged
attention but the fit on torch tensors: copy 1.92x / 1.82x / 1.33x / 1.19x, free 1.04x / 0.92x / 0.92x /
0.97x (39, 23, 9 and 2 tokens drafted). With the whole step faster (a 16-row step 14-16 ms against 35-40
before paged attention), what drafting costs every step matters more, and copies gain less at 8-16
clients, where a verifying step now costs more than its share. The run after the repacking, before paged
attention: copy 2.23x / 1.78x / 1.36x / 1.33x, free 0.97x / 0.97x / 1.04x / 1.04x.

Records: at every workload and level, labkit with drafts against labkit without (the gain speculation
brings, same process) and against llama-server with its drafts (like with like: both speculate, both read
Q4_1 weights).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from labkit.benchmarks.comparison import comparison
from labkit.benchmarks.progress import progress
from labkit.benchmarks.serve_servers import FASTEST, LABKIT_ENV, MODEL, labkit_settings
from labkit.engines.install import MAKE_ENGINES, llama_server_installed
from labkit.engines.llama_server import LlamaServerSettings, start_llama_server
from labkit.launcher import ServerHandle
from labkit.loadtest.load import load_test
from labkit.loadtest.load_result import LoadResult
from labkit.serving.http.server import start_server
from labkit.serving.http.server_options import ServerOptions
from labkit.serving.spec_load import WORKLOADS, story_chat
from labkit.table import Column, format_row, format_table
from labkit.this_machine import machine_name

CLIENTS, N_REQUESTS, MAX_TOKENS, DRAFT = (1, 2, 8, 16), 16, 64, 4
QUICK = {"clients": (1, 2), "n": 2, "max_tokens": 24}
NO_DRAFTS = {"speculative.n_max": 0}


@dataclass(frozen=True)
class SpecServer:
    """One server process of the comparison and the rows it gives: row name -> the fields each request adds."""

    name: str
    settings: str
    start: Callable[[], ServerHandle]
    rows: dict[str, dict] = field(default_factory=dict)
    available: bool = True
    missing: str = ""


LABKIT_DRAFTS, LABKIT_PLAIN = "labkit, prompt lookup", "labkit, no drafts"
LLAMA_PLAIN = "llama-server, no drafts"
# llama-server's n-gram drafts at two lookup settings (its default looks up the last 12 tokens; the short one
# the last 3, as labkit's): the records take the better at each level, as `serve` does with vLLM's threads.
LLAMA_NGRAMS = {
    "llama-server, ngram-simple": ("--spec-type", "ngram-simple", "--spec-draft-n-max", str(DRAFT)),
    "llama-server, ngram-simple n=3": (
        "--spec-type",
        "ngram-simple",
        "--spec-draft-n-max",
        str(DRAFT),
        "--spec-ngram-simple-size-n",
        "3",
    ),
}


def spec_servers(seats: int, quick: bool = False) -> list[SpecServer]:
    """labkit's server (one process, both rows) and llama-server without and with its n-gram drafts (one
    process each: its drafts are a server setting). quick: labkit eager, llama-server PASSIVE, one n-gram
    setting (as `serve --quick`)."""
    options = ServerOptions(MODEL, max_num_seqs=seats, optimize=FASTEST, compile=not quick)
    weights = "fused projections, Q4_1 weights x Q8_1 activations on labkit's kernel, head Q8_0"
    labkit = SpecServer(
        "labkit server, fuse+q4_1",
        labkit_settings(options, weights) + f", --speculative-tokens {DRAFT} (adaptive)",
        lambda: start_server(
            MODEL,
            max_num_seqs=seats,
            optimize=FASTEST,
            compile=not quick,
            speculative_tokens=DRAFT,
            env=LABKIT_ENV,
        ),
        {LABKIT_DRAFTS: {}, LABKIT_PLAIN: NO_DRAFTS},
    )
    wait_policy = "PASSIVE" if quick else None
    ngrams = dict(list(LLAMA_NGRAMS.items())[:1]) if quick else LLAMA_NGRAMS
    llamas = [(LLAMA_PLAIN, ())] + list(ngrams.items())
    return [labkit] + [
        SpecServer(
            name,
            LlamaServerSettings(MODEL, slots=seats, wait_policy=wait_policy, speculative=flags).describe(),
            lambda flags=flags: start_llama_server(
                MODEL, slots=seats, wait_policy=wait_policy, speculative=flags
            ),
            {name: {}},
            llama_server_installed(),
            f"not built. {MAKE_ENGINES}",
        )
        for name, flags in llamas
    ]


Runs = dict[str, dict[str, list[LoadResult]]]  # row -> workload -> one LoadResult per level


async def differing_answers(url: str, rows: dict[str, dict], n: int, max_tokens: int) -> int:
    """Send the same requests (every workload, n of each, 2 at a time) under each of `rows`' fields to the
    server at `url`; return how many answers differ from the first row's. Greedy: a speculating server must
    answer as a plain one."""
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600, connect=10)) as http:
        return sum([await differing_in(http, rows, chat, n, max_tokens) for chat in WORKLOADS.values()])


async def differing_in(http: httpx.AsyncClient, rows: dict[str, dict], chat, n: int, max_tokens: int) -> int:
    """differing_answers for one workload's `chat`."""
    answers = []
    for body in rows.values():
        result = await load_test(
            http, MODEL, 2, max(n // 2, 1), max_tokens, tag="same", chat=chat, extra_body=body or None
        )
        answers.append([r.text for r in result.requests])
    return sum(a != b for other in answers[1:] for a, b in zip(answers[0], other))


async def sweep(url: str, rows: dict[str, dict], clients, n: int, max_tokens: int, repeat: int) -> Runs:
    """Every workload at every level, each row's turn in a rotating order (no row always goes first)."""
    limits = httpx.Limits(max_connections=max(max(clients), n) + 4)
    names = list(rows)
    results: Runs = {name: {workload: [] for workload in WORKLOADS} for name in names}
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600, connect=10), limits=limits) as http:
        await load_test(http, MODEL, 2, 1, 4, chat=story_chat, tag=f"warm{repeat}")  # untimed
        for workload, chat in WORKLOADS.items():
            for level, c in enumerate(clients):
                turn = (repeat + level) % len(names)
                for name in names[turn:] + names[:turn]:
                    tag = f"{repeat}{workload[0]}{c}{names.index(name)}"  # a prompt of its own per row
                    result = await load_test(
                        http,
                        MODEL,
                        c,
                        max(n // c, 1),
                        max_tokens,
                        tag=tag,
                        chat=chat,
                        extra_body=rows[name] or None,
                    )
                    results[name][workload].append(result)
    return results


def median_runs(runs: list[Runs]) -> Runs:
    """Row by row, workload by workload, level by level: the run with the median tokens/s (upper middle)."""
    first = runs[0]
    return {
        name: {
            workload: [
                sorted(level, key=lambda r: r.tokens_per_s)[len(level) // 2]
                for level in zip(*(run[name][workload] for run in runs))
            ]
            for workload in first[name]
        }
        for name in first
    }


def measure(server: SpecServer, clients, n: int, max_tokens: int, repeats: int) -> tuple[Runs, int | None]:
    """The server's rows over `repeats` sweeps (median), and for a server of two rows how many answers
    differed between them (None for one row)."""
    with server.start() as handle:
        differing = None
        if len(server.rows) > 1:
            differing = asyncio.run(differing_answers(handle.url, server.rows, max(n, 4), max_tokens))
        runs = []
        for repeat in range(repeats):
            runs.append(asyncio.run(sweep(handle.url, server.rows, clients, n, max_tokens, repeat)))
            progress(
                "spec",
                f"{server.name} {repeat + 1}/{repeats}: "
                + ", ".join(
                    f"{name} {workload} {clients[-1]} clients {levels[-1].tokens_per_s:.1f} tok/s"
                    for name, by_workload in runs[-1].items()
                    for workload, levels in by_workload.items()
                ),
            )
    return median_runs(runs), differing


def drafts(result: LoadResult) -> tuple[int, int]:
    """(drafted, accepted) tokens over a level's answers, as the server's `timings` count them."""
    ok = result.ok
    return sum(r.engine.get("draft_n", 0) for r in ok), sum(r.engine.get("draft_n_accepted", 0) for r in ok)


COLUMNS = [
    Column("server", 32, align="<"),
    Column("work", 6, align="<"),
    Column("clients", 8),
    Column("tok/s", 8, ".1f"),
    Column("TTFT p50", 10, ".0f"),
    Column("TPOT p50", 10, ".1f"),
    Column("drafted", 9),
    Column("kept", 7, ".0%"),
    Column("vs plain", 10, ".2f"),
]


def plain_row(name: str) -> str:
    """The row a speculating row is measured against: the same server without drafts."""
    return LABKIT_PLAIN if name.startswith("labkit") else LLAMA_PLAIN


def table_row(name: str, workload: str, clients: int, result: LoadResult, plain: LoadResult | None) -> list:
    """One row at one level, a cell per column of COLUMNS: "-" where there were no drafts or is no plain row."""
    drafted, kept = drafts(result)
    return [
        name,
        workload,
        clients,
        result.tokens_per_s,
        result.quantile("ttft_s", 50) * 1e3,
        result.quantile("tpot_s", 50) * 1e3,
        drafted,
        kept / drafted if drafted else "-",
        "-" if plain is None or plain is result else result.tokens_per_s / plain.tokens_per_s,
    ]


def table(results: Runs, clients) -> str:
    """One line per row, workload and level; `vs plain`: tokens/s over the same server's without drafts.

    >>> print(table(results, (1, 2)))
    server                          work   clients   tok/s  TTFT p50  TPOT p50  drafted   kept  vs plain
                                                                  ms        ms
    labkit, prompt lookup           copy         1    63.8       193       8.0       36   100%      2.15
    """
    lines = [format_table(COLUMNS, []), format_row(COLUMNS[:6], ["", "", "", "", "ms", "ms"])]
    for name, by_workload in results.items():
        for workload, levels in by_workload.items():
            plain = results.get(plain_row(name), {}).get(workload)
            for level, (c, result) in enumerate(zip(clients, levels)):
                lines.append(
                    format_row(COLUMNS, table_row(name, workload, c, result, plain and plain[level]))
                )
    return "\n".join(lines)


def records(results: Runs, clients) -> list[dict]:
    """At every workload and level: labkit with drafts against itself without, and against the better of
    llama-server's n-gram settings there."""
    found = []
    for workload, levels in results.get(LABKIT_DRAFTS, {}).items():
        for level, (c, mine) in enumerate(zip(clients, levels)):
            plain = results[LABKIT_PLAIN][workload][level]
            found.append(
                comparison(
                    f"spec_labkit_{workload}_clients{c}_vs_no_drafts",
                    "tokens_per_second",
                    mine.tokens_per_s,
                    plain.tokens_per_s,
                    f"labkit server without drafts (speculative.n_max 0), same process, {c} clients",
                )
            )
            peers = [(name, results[name][workload][level]) for name in LLAMA_NGRAMS if name in results]
            if peers:
                name, theirs = max(peers, key=lambda pair: pair[1].tokens_per_s)
                found.append(
                    comparison(
                        f"spec_labkit_{workload}_clients{c}_vs_llama_server_ngram",
                        "tokens_per_second",
                        mine.tokens_per_s,
                        theirs.tokens_per_s,
                        f"{name}, {c} streamed clients, same requests",
                    )
                )
    return found


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    clients, n, max_tokens, repeats = (
        (QUICK["clients"], QUICK["n"], QUICK["max_tokens"], 1)
        if quick
        else (CLIENTS, N_REQUESTS, MAX_TOKENS, repeats)
    )
    servers = spec_servers(max(clients), quick)
    print(
        f"spec: SmolLM2-135M-Instruct, {n} greedy streamed chats a level (at least one per client) of at most "
        f"{max_tokens} tokens, workloads {', '.join(WORKLOADS)}, closed loop at {', '.join(map(str, clients))} "
        f"clients; median of {repeats} by tokens/s\nmachine: {machine_name()}\nservers, one at a time:"
    )
    for server in servers:
        print(f"  {server.name}: {server.settings}")
    results: Runs = {}
    for server in servers:
        if not server.available:
            print(f"{server.name}: skipped: {server.missing}")
            continue
        measured, differing = measure(server, clients, n, max_tokens, repeats)
        results.update(measured)
        if differing is not None:
            compiled = "decode step compiled" in server.settings
            print(
                f"{server.name}: answers with and without drafts equal: "
                + ("yes" if differing == 0 else f"NO ({differing} differ)")
                + (
                    " (compiled: a drafted step that runs eager rounds differently)"
                    if compiled and differing
                    else ""
                )
            )
    print("\n" + table(results, clients))
    errors = sum(
        len(r.requests) - len(r.ok) for rows in results.values() for levels in rows.values() for r in levels
    )
    print(f"every request answered whole: {'yes' if not errors else f'NO ({errors} failed)'}")
    return records(results, clients)
