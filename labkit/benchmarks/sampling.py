"""n samples of one prompt from one prefill, against one request and against n separate requests (SmolLM2, fp32).

In the same run, on labkit's Llama and its serving engine (`labkit.serving.sharing`), a long prompt (about
300 tokens of data/eval's text), sampled at temperature 0.8 with seeds:
1. one request, one sample: what a single stream makes;
2. one request with n samples (`add_request(prompt, n=8)`): the prompt prefilled once, its blocks shared,
   the partly filled last one copied on first write;
3. n separate requests of the same prompt with the prefix cache off (vLLM's `enable_prefix_caching=False`):
   each prefills and stores the whole prompt;
4. the same n separate requests with the prefix cache on (the engine's default): the cache finds the full
   prompt blocks of the first, so only their last partial block and last token are computed again.
Every way runs on a fresh engine with n seats; sample i of (2) draws with seed + i, as the separate request
with seed + i does, so (2), (3) and (4) give the same n answers (checked) and only their cost differs.
Runs are interleaved over `repeats`; each row is the median tokens/s with the min-max beside it.

Then the same through servers (labkit.benchmarks.sampling_servers): labkit's server (float32 and fuse+q4_1),
llama-server and vLLM CPU, each at the settings of `bench serve`, asked for the n samples in one request with
OpenAI's `n` and as n parallel requests of the prompt; labkit's server is compared like with like (float32
with vLLM's float32 at either thread setting, fuse+q4_1 with llama-server's Q4_1), against the peer's
fastest way. --quick runs the servers without vLLM (its start alone takes a minute).

Aims (issue "Spending compute at inference time"): n=8 makes at least 3x the tokens/s of one request and
at least 1.2x eight separate requests with the prefix cache off.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from labkit.benchmarks.comparison import comparison
from labkit.benchmarks.progress import progress
from labkit.benchmarks.sampling_servers import measure_servers, server_records, server_table
from labkit.models.loading import load_model
from labkit.serving.sharing import SharingRun, engine_for_samples, run_requests, without_prefix_cache
from labkit.this_machine import machine_name

EVAL_TEXT = Path(__file__).resolve().parents[2] / "data" / "eval" / "eval_text.txt"
PROMPT_TOKENS = 300  # the aim's prompt length
N = 8  # samples of the prompt
SEED = 0
AIM_VS_ONE, AIM_VS_SEPARATE = 3.0, 1.2
ONE, SHARED, SEPARATE, CACHED = "one", "shared", "separate", "separate_cached"


def long_prompt(tokenizer, tokens: int = PROMPT_TOKENS) -> list[int]:
    """The first `tokens` token ids of data/eval's text: a prompt of a known length.

    >>> len(long_prompt(tokenizer, 300))
    300
    """
    ids = tokenizer(EVAL_TEXT.read_text())["input_ids"]
    if len(ids) < tokens:
        raise ValueError(f"data/eval/eval_text.txt has {len(ids)} tokens; the benchmark needs {tokens}.")
    return ids[:tokens]


def run_way(way: str, model, tokenizer, prompt: list[int], n: int, options: dict) -> SharingRun:
    """One timed run of one way of asking for the samples, on a fresh engine with n seats."""
    engine = engine_for_samples(model, tokenizer, len(prompt), options["max_new_tokens"], n)
    if way == ONE:
        return run_requests(engine, "1 request, 1 sample", prompt, [SEED], 1, options)
    if way == SHARED:
        return run_requests(engine, f"1 request, n={n} (one prefill)", prompt, [SEED], n, options)
    if way == SEPARATE:
        return run_requests(
            without_prefix_cache(engine),
            f"{n} separate requests, no prefix cache",
            prompt,
            range(SEED, SEED + n),
            1,
            options,
        )
    return run_requests(
        engine, f"{n} separate requests, prefix cache", prompt, range(SEED, SEED + n), 1, options
    )


def measure(
    model, tokenizer, prompt: list[int], n: int, options: dict, repeats: int, warm_up: bool = True
) -> dict[str, list[SharingRun]]:
    """Every way `repeats` times, in turns (one, shared, separate, cached, one, ...), after one untimed warm-up
    unless warm_up is False (--quick: it checks that every way runs and answers alike, not its speed)."""
    ways = (ONE, SHARED, SEPARATE, CACHED)
    if warm_up:
        run_way(SHARED, model, tokenizer, prompt, n, options)  # first-call costs land on no row
    runs: dict[str, list[SharingRun]] = {way: [] for way in ways}
    for round_index in range(repeats):
        progress("sampling", f"round {round_index + 1} of {repeats}")
        for way in ways:
            runs[way].append(run_way(way, model, tokenizer, prompt, n, options))
    return runs


def median_run(runs: list[SharingRun]) -> SharingRun:
    """The run with the median tokens/s (the lower middle one for an even count)."""
    ordered = sorted(runs, key=lambda run: run.tokens_per_s)
    return ordered[(len(ordered) - 1) // 2]


def table(runs: dict[str, list[SharingRun]]) -> str:
    """One line per way: prompt tokens computed, KV blocks at most, tokens/s (median, range)."""
    lines = []
    for way_runs in runs.values():
        rates = [run.tokens_per_s for run in way_runs]
        lines.append(f"{median_run(way_runs).describe()}  (range {min(rates):.1f}-{max(rates):.1f})")
    return "\n".join(lines)


def same_answers(runs: dict[str, list[SharingRun]]) -> bool:
    """Whether the shared request and both kinds of separate requests gave the same n texts in every round."""
    return all(
        shared.texts == separate.texts == cached.texts
        for shared, separate, cached in zip(runs[SHARED], runs[SEPARATE], runs[CACHED])
    )


def records(runs: dict[str, list[SharingRun]], n: int) -> list[dict]:
    """The JSON comparisons: n samples from one prefill against each other way, tokens/s and KV blocks."""
    shared = median_run(runs[SHARED])
    rate = statistics.median(run.tokens_per_s for run in runs[SHARED])
    out = [
        comparison(
            f"sampling_n{n}_vs_{peer}",
            "tokens_per_second",
            rate,
            statistics.median(run.tokens_per_s for run in runs[way]),
            name,
        )
        for peer, way, name in (
            ("one_request", ONE, "1 request, 1 sample"),
            ("separate_no_prefix_cache", SEPARATE, f"{n} separate requests, no prefix cache"),
            ("separate_prefix_cache", CACHED, f"{n} separate requests, prefix cache"),
        )
    ]
    out.append(
        comparison(
            f"sampling_n{n}_kv_blocks_vs_separate_no_prefix_cache",
            "kv_blocks",
            shared.peak_blocks,
            median_run(runs[SEPARATE]).peak_blocks,
            f"{n} separate requests, no prefix cache",
        )
    )
    return out


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    model, tokenizer = load_model("smollm2-135m", impl="labkit")
    prompt = long_prompt(tokenizer, 64 if quick else PROMPT_TOKENS)
    n, options = (4 if quick else N), {"temperature": 0.8, "max_new_tokens": 8 if quick else 32}
    runs = measure(model, tokenizer, prompt, n, options, 1 if quick else repeats, warm_up=not quick)
    print(
        f"machine: {machine_name()}; labkit's Llama, float32, eager, OMP_WAIT_POLICY="
        f"{os.environ.get('OMP_WAIT_POLICY', 'unset')}; "
        f"engine: {n} seats, blocks of 16 tokens"
    )
    print(
        f"prompt {len(prompt)} tokens (data/eval), {n} samples of {options['max_new_tokens']} tokens at "
        f"temperature {options['temperature']}, seeds {SEED}-{SEED + n - 1}; median of {len(runs[ONE])} "
        f"interleaved run(s)" + (" (--quick: small sizes, checks that it runs, not speed)" if quick else "")
    )
    print(table(runs))
    print(
        f"same {n} answers from the shared request and the separate ones: {'yes' if same_answers(runs) else 'NO'}"
    )
    results = records(runs, n)
    vs_one, vs_separate = results[0]["ratio"], results[1]["ratio"]
    print(
        f"aims: n={n} at least {AIM_VS_ONE}x one request ({vs_one:.2f}x: {'met' if vs_one >= AIM_VS_ONE else 'missed'})"
        f", at least {AIM_VS_SEPARATE}x {n} separate requests without a prefix cache ({vs_separate:.2f}x: "
        f"{'met' if vs_separate >= AIM_VS_SEPARATE else 'missed'})"
    )
    return results + servers(tokenizer, prompt, n, options["max_new_tokens"], 1 if quick else repeats, quick)


def servers(tokenizer, prompt: list[int], n: int, max_tokens: int, repeats: int, quick: bool) -> list[dict]:
    """The servers' part: each server alone, n samples in one request and as n parallel requests."""
    print(
        f"\nthrough servers (/v1/completions, the same prompt as text, {n} samples of at most {max_tokens} tokens "
        f"at temperature 0.8; median of {repeats} interleaved run(s)), one server at a time:"
    )
    contenders, rows = measure_servers(tokenizer.decode(prompt), tokenizer, n, max_tokens, repeats, quick)
    for contender in contenders:
        print(
            f"  {contender.name}: {contender.settings}"
            if contender.available
            else f"  {contender.name}: skipped: {contender.missing}"
        )
    print(server_table(rows, n))
    records = server_records(rows, n)
    for record in records:
        print(f"{record['bench']}: {record['ratio']:.2f}x ({record['peer_name']})")
    return records
