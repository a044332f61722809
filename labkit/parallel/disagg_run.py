"""Disaggregated prefill and decode against colocated replicas, on the same two cores (notebook 16).

`compare_disaggregated()` starts two worker processes of one torch thread each (`run_ranks`), loads SmolLM2
once in each, and plays one arrival trace (`mixed_trace`: long prompts of 400-600 tokens among short chat
questions, 16 new tokens each, greedy) twice:

- **disaggregated**: process 0 prefills every prompt and chooses its first token, then hands the prompt's KV
  blocks over through shared memory; process 1 decodes (labkit.parallel.disaggregated);
- **colocated**: each process is a whole engine (a replica) that prefills and decodes its own half of the
  requests (round-robin by arrival), with chunked prefill (vLLM V1's default: a step decodes every running
  answer and feeds prompts a chunk within 256 tokens, so decodes are not held for a whole long prompt).

Why two replicas of one thread, not one engine of two threads: both setups then run the same processes with
the same one-thread kernels on the same cores, and differ only in which process does which phase. One engine
of two threads would mix in how well this CPU's kernels scale to two threads (imperfectly, at these small
shapes) and would batch all requests in one place (DistServe and vLLM's own comparison is the same: the
same devices, split by phase or not).

Per setup: TTFT (arrival -> first token, queueing included) and TPOT (the mean gap after the first token,
the hand-off included) at p50 and p95, throughput (generated tokens over the first arrival -> last finish),
goodput (requests meeting both the TTFT and the TPOT target, per second of the run, and how many), and, for
the disaggregated run, the hand-offs' bytes and milliseconds (gathering into shared memory on the prefill
side plus the one copy into the decode pool). `same_answers`: the disaggregated run's greedy tokens equal
the colocated run's, where every answer came whole from one engine. The targets, TTFT <= 3 s and TPOT <=
0.5 s: a 500-token prompt alone takes about 2.5 s to prefill on one core of this machine, and a decode step
of 8 rows about 0.35 s (both measured at load average 3.3), so a request meets them when it neither queues
behind much nor decodes beside a long prompt's chunks.

Measured with the defaults (2 long prompts of 400-600 tokens among 6 short, 16 new tokens, mean gap 1.5 s)
on a 2-core Intel Xeon shared with other work (load average 5.5-5.7: the figures are noisy), 79 s in all:

    >>> print(disaggregated_table(compare_disaggregated()))
    setup           TTFT p50  TTFT p95  TPOT p50  TPOT p95  tokens/s  goodput (met)
    disaggregated     2480ms    6195ms     540ms     809ms       4.9   0.08/s (2/8)
    colocated         1403ms   10695ms     518ms     739ms       4.4   0.11/s (3/8)
    disaggregated: 8 hand-offs, 59.7 MB in 315 ms (gathered 77 ms, copied into the decode pool 238 ms)
    goodput: requests with TTFT <= 3 s and TPOT <= 500 ms, per second; same answers both ways: True

Four more runs under load averages 4.0-5.6 put TTFT p50 at 2.4-4.2 s disaggregated against 0.75-1.39 s
colocated (one core prefills everything, and a short prompt queues behind a long one there, where a second
replica often is free); TTFT p95 at 3.7-5.4 s against 4.4-8.1 s (lower disaggregated in four runs of the
five: the long prompt prefills alone, not in chunks beside decodes); TPOT p95 at 358-1093 ms against
595-947 ms (lower disaggregated in three runs of the five); throughput within 25% either way; the hand-offs
140-315 ms for 59.7 MB (2-5 ms per MB: small beside a 2.5 s prefill). Where it loses on a CPU: decodes
batched in one process are not free (a step of 8 rows costs about 2.7 steps of 1 here, unlike a GPU's), so
the decode worker's TPOT p50 beats two replicas' in only two runs of the five (by 9% and 38%), and prefill
has one core instead of two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from labkit.core.arguments import check_int, check_seconds
from labkit.core.doors import check_items
from labkit.metrics import percentile
from labkit.parallel.disaggregated import BLOCK_SIZE, TraceRequest, mixed_trace, queues, session_rank
from labkit.parallel.ranks import run_ranks

SETUPS = ("disaggregated", "colocated")


@dataclass(frozen=True)
class DisaggResult:
    """One setup's run of the trace (times in seconds)."""

    setup: str  # "disaggregated" or "colocated"
    n_requests: int
    ttft_p50_s: float
    ttft_p95_s: float
    tpot_p50_s: float
    tpot_p95_s: float
    throughput: float  # generated tokens per second, first arrival -> last finish
    slo_met: int  # requests with TTFT <= ttft_target_s and TPOT <= tpot_target_s
    goodput: float  # slo_met per second of the run
    duration_s: float
    handoff_bytes: int  # keys and values handed over (0 colocated)
    handoff_ms: float  # gathers into shared memory + copies into the decode pool, all hand-offs
    gather_ms: float  # ... of which the prefill side's gathers
    n_handoffs: int
    same_answers: bool  # greedy tokens equal the other setup's (each answer there one engine's)
    ttft_target_s: float
    tpot_target_s: float


def summarise(
    setup: str, run: list[dict], trace: list[TraceRequest], targets: tuple[float, float], same: bool
) -> DisaggResult:
    """One setup's DisaggResult from its ranks' returns (records, hand-off timings, start)."""
    records = [r for rank in run for r in rank["records"]]
    if len(records) != len(trace):
        raise RuntimeError(f"{setup}: {len(records)} of {len(trace)} requests came back")
    ttfts = [r["ttft_s"] for r in records]
    tpots = [r["tpot_s"] for r in records if not math.isnan(r["tpot_s"])] or [math.nan]
    start = run[0]["start"]
    duration = max(r["finish_s"] for r in records) - start
    met = sum(r["ttft_s"] <= targets[0] and not r["tpot_s"] > targets[1] for r in records)
    moved = [rank for rank in run if "bytes" in rank]
    gathers = [s for rank in run for s in rank.get("gather_s", [])]
    copies = [s for rank in run for s in rank.get("copy_s", [])]
    return DisaggResult(
        setup,
        len(records),
        percentile(ttfts, 50),
        percentile(ttfts, 95),
        percentile(tpots, 50),
        percentile(tpots, 95),
        sum(len(r["tokens"]) for r in records) / duration,
        met,
        met / duration,
        duration,
        sum(rank["bytes"] for rank in moved),
        (sum(gathers) + sum(copies)) * 1e3,
        sum(gathers) * 1e3,
        len(gathers),
        same,
        *targets,
    )


def answers(run: list[dict]) -> dict[int, list[int]]:
    return {r["index"]: r["tokens"] for rank in run for r in rank["records"]}


def compare_disaggregated(
    model: str = "smollm2-135m",
    quick: bool = False,
    ttft_target_s: float = 3.0,
    tpot_target_s: float = 0.5,
    max_num_seqs: int = 8,
    mean_gap_s: float = 1.5,
    colocated_chunked: bool = True,
    trace: Sequence[TraceRequest] | None = None,
    seed: int = 0,
) -> list[DisaggResult]:
    """The trace disaggregated, then colocated, on two worker processes of one thread (module doc).

    quick: 1 long prompt among 3 short, 8 new tokens (for CI); else 2 long among 6 short, 16 new tokens.
    mean_gap_s: the trace's mean gap between arrivals; trace: your own (`mixed_trace`) instead.
    ttft_target_s, tpot_target_s: goodput's targets. colocated_chunked: False runs the replicas prefill
    first (a long prompt's whole prefill then stalls that replica's decodes). Each engine has max_num_seqs
    seats and the blocks for that many of the trace's longest requests.

        >>> [(r.setup, round(r.tpot_p95_s, 2), r.same_answers) for r in compare_disaggregated(quick=True)]
        [('disaggregated', ..., True), ('colocated', ..., True)]
    """
    from labkit.models.loading import load_tokenizer

    if not isinstance(model, str):
        raise TypeError(
            f"model must be a model's name, e.g. 'smollm2-135m' (loaded in each worker), got {model!r}."
        )
    for name, flag in (("quick", quick), ("colocated_chunked", colocated_chunked)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, got {flag!r}.")
    targets = (check_seconds("ttft_target_s", ttft_target_s), check_seconds("tpot_target_s", tpot_target_s))
    check_int("max_num_seqs", max_num_seqs, minimum=1)
    if trace is None:
        shape = dict(n_long=1, n_short=3, max_new_tokens=8) if quick else dict(n_long=2, n_short=6)
        trace = mixed_trace(load_tokenizer(model), mean_gap_s=mean_gap_s, seed=seed, **shape)
    trace = list(check_items("trace", trace, "TraceRequest (mixed_trace's)", of=TraceRequest))
    if not trace:
        raise ValueError("trace must hold at least one request.")
    channels = queues()
    longest = max(len(r.prompt_ids) + r.max_new_tokens for r in trace)
    options = {"max_num_seqs": max_num_seqs, "n_blocks": max_num_seqs * math.ceil(longest / BLOCK_SIZE)}
    colocated = {**options, "chunked_prefill": colocated_chunked}
    try:
        ranks = run_ranks(session_rank, 2, model, trace, channels, options, colocated)
    finally:
        for channel in channels:
            channel.close()
    runs = {setup: [rank[setup] for rank in ranks] for setup in SETUPS}
    same = answers(runs["disaggregated"]) == answers(runs["colocated"])
    return [summarise(setup, runs[setup], trace, targets, same) for setup in SETUPS]


def disaggregated_table(results: Sequence[DisaggResult]) -> str:
    """compare_disaggregated's results, one line per setup (times in milliseconds), then the hand-offs and the
    goodput's targets.

    >>> print(disaggregated_table(compare_disaggregated()))
    setup           TTFT p50  TTFT p95  TPOT p50  TPOT p95  tokens/s  goodput (met)
    ...
    """
    results = check_items(
        "results", results, "DisaggResult (what compare_disaggregated returns)", of=DisaggResult
    )
    lines = [
        f"{'setup':14} {'TTFT p50':>9} {'TTFT p95':>9} {'TPOT p50':>9} {'TPOT p95':>9} {'tokens/s':>9} "
        f"{'goodput (met)':>14}"
    ]
    for r in results:
        lines.append(
            f"{r.setup:14} {r.ttft_p50_s * 1e3:7.0f}ms {r.ttft_p95_s * 1e3:7.0f}ms "
            f"{r.tpot_p50_s * 1e3:7.0f}ms {r.tpot_p95_s * 1e3:7.0f}ms {r.throughput:9.1f} "
            f"{f'{r.goodput:.2f}/s ({r.slo_met}/{r.n_requests})':>14}"
        )
    for r in results:
        if r.n_handoffs:
            lines.append(
                f"{r.setup}: {r.n_handoffs} hand-offs, {r.handoff_bytes / 1e6:.1f} MB in "
                f"{r.handoff_ms:.0f} ms (gathered {r.gather_ms:.0f} ms, copied into the decode pool "
                f"{r.handoff_ms - r.gather_ms:.0f} ms)"
            )
    if results:
        r = results[0]
        lines.append(
            f"goodput: requests with TTFT <= {r.ttft_target_s:g} s and TPOT <= "
            f"{r.tpot_target_s * 1e3:.0f} ms, per second; "
            f"same answers both ways: {all(x.same_answers for x in results)}"
        )
    return "\n".join(lines)
