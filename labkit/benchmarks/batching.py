"""Continuous batching vs real static batches vs one request at a time: 16 chat requests to SmolLM2 (fp32).

The workload of notebook 10 (`labkit.serving.workload`): 16 chat prompts of varied length and
max_new_tokens (16-64, greedy, an answer may end early at EOS), arriving together, then staggered
(Poisson arrivals, 0.1 s apart on average). In the same run, on labkit's Llama:
1. `labkit.generate`, one request at a time;
2. real static batches of S seats (S = 4): the next S requests start once all arrived and the previous
   batch is done, prompts padded to the longest, every row decoding until the longest answer ends
   (`labkit.serving.static_batch`; the share of wasted slots, padding + finished rows, is printed);
3. the `Engine` (continuous batching) with the SAME S seats: what the batching policy alone buys;
4. the `Engine` with 16 seats: what more seats buy on top;
5. the `Engine` with 16 seats and chunked prefill under a per-step token budget.
Static batches and the Engine share one model and KV pool (`BlockPool`); the static batch pads its rows,
the Engine packs the rows of a step that feeds prompts end to end (`PackedKV`), without padding.
Runs are interleaved over `repeats`; each row is the run with the median total tokens/s, with the
min-max beside it. TTFT counts from each request's arrival. Every run's greedy tokens are checked
against every other's.

Aims (notebook 10): continuous batching (16 seats) at least 4x the total tokens/s of one at a time, and a
better p50 TTFT; continuous vs static at equal seats is shown on its own line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from labkit.benchmarks.comparison import comparison
from labkit.benchmarks.progress import progress
from labkit.core.forward import context_length
from labkit.models.loading import load_model
from labkit.serving.run_result import RunResult, results_table
from labkit.serving.workload import (
    WorkItem,
    make_workload,
    run_continuous,
    run_one_at_a_time,
    run_static_batches,
)
from labkit.this_machine import machine_name

SCENARIOS = {"together": False, "staggered": True}  # name -> staggered arrivals
ONE, STATIC, SAME, FULL, CHUNKED = "one", "static", "continuous_same_seats", "continuous", "chunked"
CHUNK_BUDGET = (
    64  # tokens per engine step with chunked prefill (prompts here are 34-73 tokens, decodes 1 each)
)


@dataclass(frozen=True)
class Runner:
    """One way to serve the workload, and the settings it runs with (printed with the results)."""

    seats: int  # requests in one forward pass, at most
    padding: str  # what padding it pays
    chunked: bool  # chunked prefill
    budget: str  # tokens per step
    prefix_cache: bool  # reuses the KV blocks of a prompt prefix already computed (the Engine's, always on)
    run: Callable[[list[WorkItem]], RunResult]


def make_runners(model, tokenizer, n: int, seats: int) -> dict[str, Runner]:
    """The runners of this run, by key (the chunked one only where the Engine has the option).

    >>> make_runners(model, tokenizer, 16, 4)[STATIC].seats
    4
    """
    default, step_pad = (
        f"whole prompts, up to {context_length(model)}",
        "none (a step's rows packed end to end)",
    )
    runners = {
        ONE: Runner(1, "none", False, "-", False, lambda w: run_one_at_a_time(model, tokenizer, w)),
        STATIC: Runner(
            seats,
            "prompts to the longest; finished rows to the longest answer",
            False,
            "-",
            False,
            lambda w: run_static_batches(model, tokenizer, w, batch_size=seats),
        ),
        SAME: Runner(
            seats,
            step_pad,
            False,
            default,
            True,
            lambda w: run_continuous(model, tokenizer, w, max_num_seqs=seats),
        ),
        FULL: Runner(
            n, step_pad, False, default, True, lambda w: run_continuous(model, tokenizer, w, max_num_seqs=n)
        ),
    }
    runners[CHUNKED] = Runner(
        n,
        "none (a step's rows packed end to end)",
        True,
        str(CHUNK_BUDGET),
        True,
        lambda w: run_continuous(
            model, tokenizer, w, max_num_seqs=n, chunked_prefill=True, max_num_batched_tokens=CHUNK_BUDGET
        ),
    )
    return runners


def settings_lines(runners: dict[str, Runner]) -> list[str]:
    """One line per runner: seats, chunked prefill, token budget per step, prefix cache, torch threads, padding."""
    threads, yes = torch.get_num_threads(), {True: "yes", False: "no"}
    return [
        f"  {key:<22} seats {r.seats:>2}, chunked prefill {yes[r.chunked]}, tokens/step {r.budget}, prefix "
        f"cache {yes[r.prefix_cache]}, threads {threads}, padding: {r.padding}"
        for key, r in runners.items()
    ]


def median_run(runs: list[RunResult]) -> RunResult:
    """The run whose total tokens/s is the median (the upper middle one for an even count)."""
    return sorted(runs, key=lambda r: r.tokens_per_s)[len(runs) // 2]


def measure(
    runners: dict[str, Runner], workload: list[WorkItem], repeats: int, scenario: str
) -> dict[str, list[RunResult]]:
    """Every runner `repeats` times on the workload, interleaved so that a noisy moment hits all of them."""
    runs: dict[str, list[RunResult]] = {key: [] for key in runners}
    for repeat in range(repeats):
        for key, runner in runners.items():
            runs[key].append(runner.run(workload))
            progress(
                "batching",
                f"{scenario} {repeat + 1}/{repeats} {key}: {runs[key][-1].tokens_per_s:.1f} tokens/s",
            )
    return runs


def spread_lines(runs: dict[str, list[RunResult]]) -> list[str]:
    """Per runner: the median tokens/s and the range (min-max) over the repeats."""
    lines = []
    for key, results in runs.items():
        rates = sorted(r.tokens_per_s for r in results)
        lines.append(
            f"  {key:<22} {median_run(results).tokens_per_s:6.1f} tokens/s "
            f"(range {rates[0]:.1f}-{rates[-1]:.1f} over {len(rates)})"
        )
    return lines


def disagreements(runs: dict[str, list[RunResult]]) -> list[str]:
    """'runner: requests i, j' for every run whose greedy tokens differ from the first runner's first run."""
    reference = next(iter(runs.values()))[0].token_ids
    found = []
    for name, results in runs.items():
        for result in results:
            differ = [i for i, (a, b) in enumerate(zip(result.token_ids, reference)) if a != b]
            if differ:
                found.append(f"{name}: requests {differ}")
    return found


def records(scenario: str, rows: dict[str, RunResult], n: int, seats: int) -> list[dict]:
    """The comparison records of one scenario (tokens/s and p50 TTFT; chunked prefill's where it ran)."""
    one, static, same, full = (rows[k] for k in (ONE, STATIC, SAME, FULL))
    what = f"{n} requests arriving {scenario}"
    found = [
        comparison(
            f"batching_vs_one_at_a_time_{scenario}",
            "tokens_per_second",
            full.tokens_per_s,
            one.tokens_per_s,
            f"one request at a time (labkit.generate), {what}; continuous with {n} seats",
        ),
        comparison(
            f"batching_vs_static_same_seats_{scenario}",
            "tokens_per_second",
            same.tokens_per_s,
            static.tokens_per_s,
            f"{static.name}, {what}; continuous with the same {seats} seats",
        ),
        comparison(
            f"batching_{n}_vs_{seats}_seats_{scenario}",
            "tokens_per_second",
            full.tokens_per_s,
            same.tokens_per_s,
            f"continuous batching with {seats} seats, {what}",
        ),
        comparison(
            f"batching_ttft_p50_{scenario}",
            "seconds",
            full.ttft_p50,
            one.ttft_p50,
            f"p50 TTFT one request at a time, {what}; continuous with {n} seats",
        ),
    ]
    if CHUNKED in rows:
        chunked = rows[CHUNKED]
        found += [
            comparison(
                f"batching_chunked_prefill_{scenario}",
                "tokens_per_second",
                chunked.tokens_per_s,
                full.tokens_per_s,
                f"continuous batching with {n} seats, whole prompts, {what}",
            ),
            comparison(
                f"batching_chunked_prefill_tpot_p95_{scenario}",
                "seconds",
                chunked.tpot_p95,
                full.tpot_p95,
                f"p95 TPOT continuous, {n} seats, whole prompts, {what}",
            ),
        ]
    return found


def aims_lines(rows: dict[str, RunResult], n: int, seats: int) -> list[str]:
    """The aim (continuous at n seats vs one at a time) and, apart, the equal-seat and seat-count ratios."""
    one, static, same, full = (rows[k] for k in (ONE, STATIC, SAME, FULL))
    lines = [
        f"continuous ({n} seats) vs one at a time: {full.tokens_per_s / one.tokens_per_s:.2f}x tokens/s "
        f"(aim >= 4x), p50 TTFT {full.ttft_p50 * 1e3:.0f} ms vs {one.ttft_p50 * 1e3:.0f} ms (aim: lower)",
        f"continuous vs static, both {seats} seats: {same.tokens_per_s / static.tokens_per_s:.2f}x tokens/s, "
        f"p50 TTFT {same.ttft_p50 * 1e3:.0f} ms vs {static.ttft_p50 * 1e3:.0f} ms: the batching policy alone "
        f"(static wasted {static.waste.share:.0%} of its slots on padding and finished rows)",
        f"continuous, {n} seats vs {seats}: {full.tokens_per_s / same.tokens_per_s:.2f}x tokens/s: what more "
        "seats buy",
    ]
    if CHUNKED in rows:
        chunked = rows[CHUNKED]
        lines.append(
            f"chunked prefill ({CHUNK_BUDGET} tokens/step) vs whole prompts, {n} seats: "
            f"{chunked.tokens_per_s / full.tokens_per_s:.2f}x tokens/s, p95 TPOT "
            f"{chunked.tpot_p95 * 1e3:.1f} ms vs {full.tpot_p95 * 1e3:.1f} ms, p50 TTFT "
            f"{chunked.ttft_p50 * 1e3:.0f} ms vs {full.ttft_p50 * 1e3:.0f} ms"
        )
    return lines


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    model, tokenizer = load_model("smollm2-135m", impl="labkit")
    # quick: the fewest tokens that still give every request a TPOT (2 or more), and no warm-up (it checks
    # that every runner runs and agrees, not its speed)
    n, new_tokens, seats, repeats = (4, (2, 4), 2, 1) if quick else (16, (16, 64), 4, repeats)
    runners = make_runners(model, tokenizer, n, seats)
    if not quick:
        for runner in runners.values():  # untimed warm-up: first calls allocate and pick kernels
            runner.run(make_workload(tokenizer, 2, max_new_tokens=(4, 4)))
    print(
        f"batching: SmolLM2-135M fp32 (labkit Llama), {n} chat requests, greedy, max_new_tokens "
        f"{new_tokens[0]}-{new_tokens[1]}, median of {repeats} by total tokens/s"
    )
    print(f"machine: {machine_name()}")
    print("runners:", *settings_lines(runners), sep="\n")
    results, problems = [], []
    for scenario, staggered in SCENARIOS.items():
        workload = make_workload(tokenizer, n, staggered=staggered, max_new_tokens=new_tokens)
        runs = measure(runners, workload, repeats, scenario)
        rows = {key: median_run(found) for key, found in runs.items()}
        arrivals = f"over {workload[-1].arrival_s:.2f} s" if staggered else "at once"
        print(f"\n{scenario}: {n} requests arriving {arrivals}, {rows[ONE].output_tokens} output tokens")
        print(results_table(list(rows.values())))
        print("tokens/s, median and range of the repeats:", *spread_lines(runs), sep="\n")
        print(*aims_lines(rows, n, seats), sep="\n")
        problems += [f"{scenario}, {problem}" for problem in disagreements(runs)]
        results += records(scenario, rows, n, seats)
    print(
        f"\noutputs agree: {'yes' if not problems else 'NO'} (greedy token ids of every request, every runner, "
        f"every run{'' if not problems else '; differ: ' + '; '.join(problems)})"
    )
    print("peers: llama.cpp and vLLM serve the same requests over HTTP in python -m labkit.bench engines")
    return results
