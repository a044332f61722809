"""Continuous batching vs static batches vs one request at a time: 16 chat requests to SmolLM2 (fp32).

The workload of notebook 10 (`labkit.serving.workload`): 16 chat prompts of varied length and
max_new_tokens (16-64, greedy, an answer may end early at EOS), arriving together, then staggered
(Poisson arrivals, 0.1 s apart on average). In the same run, on labkit's Llama:
`labkit.generate` one request at a time; the `Engine` in static batches of 4 (a batch waits for all its
requests, and the next for the whole batch to finish); the `Engine` with continuous batching (up to 16).
Each row is the run with the median total tokens/s of `repeats`; TTFT counts from each request's arrival.
Every run's greedy tokens are checked against every other's.

Aims (notebook 10): continuous batching at least 4x the total tokens/s of one at a time, and a better p50 TTFT.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from labkit.bench import comparison, machine_name
from labkit.models.loading import load_model
from labkit.serving.workload import (RunResult, WorkItem, make_workload, results_table, run_continuous,
                                     run_one_at_a_time, run_static_batches)

SCENARIOS = {"together": False, "staggered": True}  # name -> staggered arrivals
ONE, STATIC, CONTINUOUS = "one at a time", "static batches", "continuous batching"


def _progress(message: str) -> None:
    print(f"[batching] {message}", file=sys.stderr, flush=True)


def median_run(runs: list[RunResult]) -> RunResult:
    """The run whose total tokens/s is the median (the upper middle one for an even count)."""
    return sorted(runs, key=lambda r: r.tokens_per_s)[len(runs) // 2]


def measure(runners: dict[str, Callable[[list[WorkItem]], RunResult]], workload: list[WorkItem],
            repeats: int, scenario: str) -> dict[str, list[RunResult]]:
    """Every runner `repeats` times on the workload, interleaved so that a noisy moment hits all of them."""
    runs: dict[str, list[RunResult]] = {name: [] for name in runners}
    for repeat in range(repeats):
        for name, runner in runners.items():
            runs[name].append(runner(workload))
            _progress(f"{scenario} {repeat + 1}/{repeats} {name}: {runs[name][-1].tokens_per_s:.1f} tokens/s")
    return runs


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


def records(scenario: str, rows: dict[str, RunResult], n: int) -> list[dict]:
    """The comparison records of one scenario: tokens/s vs one at a time and vs static, p50 TTFT."""
    cont, one, static = rows[CONTINUOUS], rows[ONE], rows[STATIC]
    what = f"{n} requests arriving {scenario}"
    return [
        comparison(f"batching_vs_one_at_a_time_{scenario}", "tokens_per_second", cont.tokens_per_s,
                   one.tokens_per_s, f"one request at a time (labkit.generate), {what}"),
        comparison(f"batching_vs_static_{scenario}", "tokens_per_second", cont.tokens_per_s, static.tokens_per_s,
                   f"the engine in {static.name}, {what}"),
        comparison(f"batching_ttft_p50_{scenario}", "seconds", cont.ttft_p50, one.ttft_p50,
                   f"p50 TTFT one request at a time, {what}"),
    ]


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    model, tokenizer = load_model("smollm2-135m", impl="labkit")
    n, new_tokens, batch_size, repeats = (4, (4, 8), 2, 1) if quick else (16, (16, 64), 4, repeats)
    runners = {ONE: lambda w: run_one_at_a_time(model, tokenizer, w),
               STATIC: lambda w: run_static_batches(model, tokenizer, w, batch_size=batch_size),
               CONTINUOUS: lambda w: run_continuous(model, tokenizer, w, max_num_seqs=n)}
    for runner in runners.values():  # untimed warm-up: first calls allocate and pick kernels
        runner(make_workload(tokenizer, 2, max_new_tokens=(4, 4)))
    print(f"batching: SmolLM2-135M fp32 (labkit Llama), {n} chat requests, greedy, max_new_tokens "
          f"{new_tokens[0]}-{new_tokens[1]}, median of {repeats} by total tokens/s")
    print(f"machine: {machine_name()}")
    results, problems = [], []
    for scenario, staggered in SCENARIOS.items():
        workload = make_workload(tokenizer, n, staggered=staggered, max_new_tokens=new_tokens)
        runs = measure(runners, workload, repeats, scenario)
        rows = {name: median_run(found) for name, found in runs.items()}
        arrivals = f"over {workload[-1].arrival_s:.2f} s" if staggered else "at once"
        print(f"\n{scenario}: {n} requests arriving {arrivals}, {rows[ONE].output_tokens} output tokens")
        print(results_table(list(rows.values())))
        cont, one = rows[CONTINUOUS], rows[ONE]
        print(f"continuous vs one at a time: {cont.tokens_per_s / one.tokens_per_s:.2f}x tokens/s (aim >= 4x), "
              f"p50 TTFT {cont.ttft_p50 * 1e3:.0f} ms vs {one.ttft_p50 * 1e3:.0f} ms (aim: lower)")
        problems += [f"{scenario}, {problem}" for problem in disagreements(runs)]
        results += records(scenario, rows, n)
    print(f"\noutputs agree: {'yes' if not problems else 'NO'} (greedy token ids of every request, every runner, "
          f"every run{'' if not problems else '; differ: ' + '; '.join(problems)})")
    print("vLLM peer row: skipped (no vLLM server here; the local-engines issue adds it)")
    return results
