"""Real engines: batch-1 decode of labkit, transformers, llama.cpp and vLLM, and 8 requests at once through three servers.

The servers: labkit's (float32, 8 seats), llama.cpp's own llama-server (Q4_1, 8 slots) and vLLM CPU
(float32); `python -m labkit.bench serve` sweeps them (and labkit's fastest weights) under load.

SmolLM2-135M-Instruct on one machine, one engine at a time: labkit's Llama and transformers run the
float32 weights dequantized from the shipped GGUF file; llama.cpp runs that Q4_1 file itself; vLLM's
CPU build serves labkit's float32 safetensors folder. Batch 1: one greedy chat answer of 64 tokens
(prefill of its 40-token prompt included), median of `repeats`. Concurrency: 8 chat requests of 32
tokens sent at once through the OpenAI API, all output tokens over the wall time, median of `repeats`.
Engines that are not installed are skipped with what to run (`make engines`).

Notebook 12 times each engine under each OpenMP wait policy and keeps its fastest batch-1 try, like with
like: measure_in_child (an in-process engine in a process of its own, labkit.benchmarks.engines_child),
measure_started (a server started under a policy, then stopped), fastest_rows and tries_table.

    >>> tries = [measure_in_child("transformers", "ACTIVE"), measure_in_child("llama.cpp", "ACTIVE")]
    >>> print(side_by_side(fastest_rows(tries)))
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import SimpleNamespace

import torch

from labkit.benchmarks.comparison import comparison
from labkit.benchmarks.engines_child import DECODE_PROMPT, IN_PROCESS_ENGINES
from labkit.benchmarks.progress import progress
from labkit.benchmarks.serve_servers import (
    FASTEST_LABKIT,
    LABKIT_FLOAT32,
    VLLM,
    VLLM_ALL_CORES,
    Contender,
    contenders,
)
from labkit.core.arguments import check_int
from labkit.core.doors import check_items
from labkit.engines.compare import EngineRow, number
from labkit.engines.install import MAKE_ENGINES, llama_server_installed, llamacpp_installed, vllm_installed
from labkit.engines.llamacpp import load_llamacpp
from labkit.engines.measure import CONCURRENT_REQUESTS, answer_rate, fresh, measure, median_of
from labkit.engines.runners import LabkitRunner, LlamaCppRunner, TransformersRunner
from labkit.engines.server_runner import ServerRunner
from labkit.fast.processes import check_policy, run_in_child
from labkit.launcher import ServerHandle
from labkit.loadtest.load import question
from labkit.models.loading import from_scratch, load_model, load_tokenizer
from labkit.table import Column, format_table
from labkit.this_machine import machine_name
from labkit.timing import check_repeats

MODEL = "smollm2-135m"
CHILD = "labkit.benchmarks.engines_child"  # the module each in-process engine's own process runs
# The address of a vLLM server already running at start_vllm_server(MODEL)'s defaults, which the bench then
# measures and leaves running instead of starting its own (a minute on 2 cores): tests/engines/test_real.py
# hands its module's server to the quick run this way.
VLLM_URL_ENV = "LABKIT_BENCH_VLLM_URL"


def median_rate(measure_once: Callable[[int], float], repeats: int, warm_up: bool = True) -> float:
    """The median of measure_once(1), ... measure_once(repeats), after measure_once(0) as an untimed warm-up
    unless warm_up is False (--quick: it checks that every engine answers, not its speed)."""
    if warm_up:
        measure_once(0)
    return median_of(lambda i: measure_once(i + 1), repeats)


def in_process_rates(repeats: int, tokens: int, quick: bool = False) -> dict[str, float]:
    """Batch-1 tokens/s of every engine that runs inside this process (quick: no warm-up)."""
    model, tokenizer = load_model(MODEL)
    llama = from_scratch(model)  # labkit's Llama on the same weights: one load, not two
    runners = [TransformersRunner(model, tokenizer), LabkitRunner(llama, tokenizer)]
    if llamacpp_installed():
        runners.append(LlamaCppRunner(load_llamacpp(MODEL, n_threads=torch.get_num_threads()), tokenizer))
    rates = {}
    for runner in runners:
        rates[runner.name] = median_rate(
            lambda i: answer_rate(runner, tokens, number=i), repeats, warm_up=not quick
        )
        progress("engines", f"{runner.name}: {rates[runner.name]:.1f} tokens/s at batch 1")
    return rates


def shared_url(server: Contender) -> str | None:
    """$LABKIT_BENCH_VLLM_URL when `server` is vLLM CPU and the variable is set, else None.

    >>> shared_url(server)          # vLLM CPU, with LABKIT_BENCH_VLLM_URL=http://127.0.0.1:8000
    'http://127.0.0.1:8000'
    """
    url = os.environ.get(VLLM_URL_ENV)
    return url if server.name == VLLM and url else None


def started(server: Contender) -> AbstractContextManager:
    """server.start(), a handle with the server's `url` that stops it at the end of the `with`; or, where
    shared_url(server) names a running server, a handle with that url, left running.

        >>> with started(server) as handle:
        ...     runner = ServerRunner(server.name, handle.url, MODEL, tokenizer)
    """
    url = shared_url(server)
    if url:
        progress("engines", f"{server.name}: the server already running at {url} (${VLLM_URL_ENV})")
        return nullcontext(SimpleNamespace(url=url))
    return server.start()


def server_rates(
    repeats: int, tokens: int, concurrent_tokens: int, quick: bool = False
) -> tuple[dict[str, float], dict[str, float]]:
    """(batch-1 tokens/s of vLLM, 8-request tokens/s of each server), one server running at a time; quick:
    labkit's server eager (serve_servers.contenders), vLLM kept, no warm-up."""
    tokenizer = load_tokenizer(MODEL)
    chats = [question(i) for i in range(CONCURRENT_REQUESTS)]
    left_out = (FASTEST_LABKIT, VLLM_ALL_CORES)  # notebook 12's table: float32 labkit, vLLM at its default
    servers = contenders(CONCURRENT_REQUESTS, quick=quick, vllm=True)
    servers = [server for server in servers if server.name not in left_out]
    batch1, concurrent = {}, {}
    for server in (server for server in servers if server.available):
        began = time.perf_counter()
        with started(server) as handle:
            progress("engines", f"{server.name} ready after {time.perf_counter() - began:.0f} s")
            runner = ServerRunner(server.name, handle.url, MODEL, tokenizer)
            if server.name == VLLM:
                batch1["vLLM"] = median_rate(
                    lambda i: answer_rate(runner, tokens, number=i), repeats, warm_up=not quick
                )
            concurrent[server.name] = median_rate(
                lambda i: runner.concurrent_rate(
                    [fresh(chat, i * len(chats) + k) for k, chat in enumerate(chats)], concurrent_tokens
                ),
                repeats,
                warm_up=not quick,
            )
            progress(
                "engines",
                f"{server.name}: {concurrent[server.name]:.1f} tokens/s with {CONCURRENT_REQUESTS} requests at once",
            )
    print(
        "\nservers, one at a time:\n"
        + "\n".join(
            f"  {server.name}: {server.settings}"
            + (f" (already running at {url}: ${VLLM_URL_ENV})" if (url := shared_url(server)) else "")
            for server in servers
        )
    )
    return batch1, concurrent


def measure_in_child(engine: str, policy: str, repeats: int = 3, quick: bool = False) -> EngineRow:
    """One in-process engine of notebook 12's table ("transformers", "labkit" or "llama.cpp"), loaded and
    measured in a process of its own under OpenMP wait policy `policy` (quick: `measure`'s quick sizes)."""
    if engine not in IN_PROCESS_ENGINES:
        raise ValueError(
            f"Unknown in-process engine {engine!r}; choose one of: {', '.join(IN_PROCESS_ENGINES)}."
        )
    check_policy(policy)
    check_repeats(repeats)
    [record] = run_in_child(
        CHILD, [engine, "--repeats", str(repeats), *(["--quick"] if quick else [])], policy
    )
    return EngineRow(**record)


def measure_started(
    name: str,
    start: Callable[[], ServerHandle],
    tokenizer,
    policy: str,
    repeats: int = 3,
    quick: bool = False,
) -> EngineRow:
    """A server's row: start() (a server under OpenMP wait policy `policy`), timed until it answers, measured
    through the OpenAI API (quick: `measure`'s quick sizes), then stopped, so that no other server's threads
    wait beside the next one."""
    check_policy(policy)
    check_repeats(repeats)
    began = time.perf_counter()
    with start() as handle:
        startup = time.perf_counter() - began
        runner = ServerRunner(name, handle.url, MODEL, tokenizer, pid=handle.process.pid)
        return measure(runner, startup, repeats=repeats, policy=policy, quick=quick)


def decode_rate_in_child(model: str, policy: str, prompt: str = DECODE_PROMPT, new_tokens: int = 64) -> float:
    """Tokens/s of one greedy decode of `model` through transformers, prefill left out, in a process of its
    own under `policy` (labkit.engines.measure.decode_rate there)."""
    check_policy(policy)
    check_int("new_tokens", new_tokens, minimum=1)
    [record] = run_in_child(
        CHILD, ["decode", "--model", model, "--prompt", prompt, "--tokens", str(new_tokens)], policy
    )
    return record["tokens_per_second"]


def fastest_rows(tries: Sequence[EngineRow]) -> list[EngineRow]:
    """Each engine's try with the most tokens/s at batch 1 (its table row), engines in the order they first came.

    >>> [(row.engine, row.policy) for row in fastest_rows(tries)]
    [('transformers', 'ACTIVE'), ('labkit server', 'PASSIVE')]
    """
    check_items("tries", tries, "EngineRow (from measure_in_child)", of=EngineRow)
    best: dict[str, EngineRow] = {}
    for row in tries:
        if row.engine not in best or row.tokens_per_s > best[row.engine].tokens_per_s:
            best[row.engine] = row
    return list(best.values())


def try_cell(row: EngineRow | None, kept: bool) -> str:
    """One try as a cell: '35.0 (70.1)*', tokens/s at batch 1 (with 8 requests), * if kept; '-' if none."""
    if row is None:
        return "-"
    return f"{row.tokens_per_s:.1f} ({number(row.concurrent_tokens_per_s, '.1f')})" + ("*" if kept else " ")


def tries_table(tries: Sequence[EngineRow]) -> str:
    """Every try as text: an engine a line, its tokens/s at batch 1 (and with 8 requests) under each policy,
    with * beside the try fastest_rows keeps.

        >>> print(tries_table(tries))
        tokens/s b=1 (8 req)             PASSIVE            ACTIVE
        transformers                24.4 (61.3)       35.0 (70.1)*
        llama.cpp                      45.7 (-)         150.2 (-)*
        * the try the table keeps: the engine's most tokens/s at batch 1
    """
    check_items("tries", tries, "EngineRow (from measure_in_child)", of=EngineRow)
    policies = list(dict.fromkeys(row.policy for row in tries))
    kept = {id(row) for row in fastest_rows(tries)}
    columns = [Column("tokens/s b=1 (8 req)", 22, align="<")] + [Column(policy, 18) for policy in policies]
    rows = []
    for engine in dict.fromkeys(row.engine for row in tries):
        found = [
            next((r for r in tries if r.engine == engine and r.policy == policy), None) for policy in policies
        ]
        rows.append([engine] + [try_cell(row, id(row) in kept) for row in found])
    return format_table(columns, rows) + "\n* the try the table keeps: the engine's most tokens/s at batch 1"


def print_table(title: str, rates: dict[str, float], base: str) -> None:
    columns = [Column("engine", 26, align="<"), Column("tokens/s", 10, ".1f"), Column("vs " + base, 20)]
    print(
        f"\n{title}\n"
        + format_table(columns, [[name, rate, f"{rate / rates[base]:.2f}x"] for name, rate in rates.items()])
    )


def missing_lines() -> list[str]:
    return [
        f"{name} rows: skipped: not installed. {MAKE_ENGINES}"
        for name, ok in (
            ("llama.cpp", llamacpp_installed()),
            ("llama-server", llama_server_installed()),
            ("vLLM", vllm_installed()),
        )
        if not ok
    ]


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    tokens, concurrent_tokens, repeats = (8, 4, 1) if quick else (64, 32, repeats)
    print(
        f"engines: SmolLM2-135M-Instruct, greedy chat; batch 1 = one answer of {tokens} tokens (prefill "
        f"included); {CONCURRENT_REQUESTS} requests x {concurrent_tokens} tokens at once through the OpenAI API; "
        f"median of {repeats}\nmachine: {machine_name()}"
    )
    batch1 = in_process_rates(repeats, tokens, quick)
    vllm_batch1, concurrent = server_rates(repeats, tokens, concurrent_tokens, quick)
    batch1.update(vllm_batch1)
    print_table("batch 1 (vLLM over HTTP, the others in-process)", batch1, "labkit")
    print_table(f"{CONCURRENT_REQUESTS} requests at once, through each server", concurrent, LABKIT_FLOAT32)
    for line in missing_lines():
        print(line)
    records = [
        comparison(
            f"engines_batch1_vs_{name.replace('.', '')}",
            "tokens_per_second",
            batch1["labkit"],
            rate,
            f"{name}, batch-1 greedy chat, same model",
        )
        for name, rate in batch1.items()
        if name != "labkit"
    ]
    records += [
        comparison(
            f"engines_concurrent{CONCURRENT_REQUESTS}_vs_{name.split()[0].replace('.', '')}",
            "tokens_per_second",
            concurrent[LABKIT_FLOAT32],
            rate,
            f"{name}, {CONCURRENT_REQUESTS} requests at once",
        )
        for name, rate in concurrent.items()
        if name != LABKIT_FLOAT32
    ]
    return records
