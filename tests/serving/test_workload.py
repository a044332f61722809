"""The batching workload and its runners (one at a time, real padded static batches, continuous batching,
with chunked prefill): the same greedy tokens from each, the waste a static batch
pays, and numbers that add up (`python -m labkit.bench batching`: tests/benchmarks/test_batching.py)."""

import math

import pytest

import labkit
from labkit.decoding.config import DecodingConfig
from labkit.serving.run_result import RunResult, results_table
from labkit.serving.static_batch import StaticBatch, Waste, planned_waste, slot_waste
from labkit.serving.workload import (
    WorkItem,
    make_workload,
    run_continuous,
    run_one_at_a_time,
    run_static_batches,
)


def test_workload_varies_and_a_seed_reproduces_it(tokenizer):
    together = make_workload(tokenizer, 16)
    assert len(together) == 16 and all(item.arrival_s == 0 for item in together)
    assert len({len(item.prompt_ids) for item in together}) >= 10  # prompts of many lengths
    assert len({item.max_new_tokens for item in together}) >= 5
    assert all(16 <= item.max_new_tokens <= 64 for item in together)
    assert make_workload(tokenizer, 16) == together
    assert make_workload(tokenizer, 16, seed=1) != together
    staggered = make_workload(tokenizer, 16, staggered=True, mean_gap_s=0.2)
    arrivals = [item.arrival_s for item in staggered]
    assert arrivals[0] == 0 and all(b > a for a, b in zip(arrivals, arrivals[1:]))
    assert 0.2 * 15 / 3 < arrivals[-1] < 0.2 * 15 * 3  # 15 exponential gaps of mean 0.2 s
    assert make_workload(tokenizer, 16, staggered=True, mean_gap_s=0.2) == staggered
    assert len(make_workload(tokenizer, 40)) == 40  # more requests than questions: they repeat
    with pytest.raises(ValueError, match="max_new_tokens"):
        make_workload(tokenizer, 4, max_new_tokens=(8, 4))
    for n_requests in (0, 4.0, True):
        with pytest.raises(ValueError, match="n_requests must be a whole number of 1 or more, got "):
            make_workload(tokenizer, n_requests)


def check_consistent(result: RunResult, workload) -> None:
    """Counts and times that must hold for any run of any runner."""
    lengths = [len(ids) for ids in result.token_ids]
    assert result.output_tokens == sum(lengths)
    assert all(1 <= n <= item.max_new_tokens for n, item in zip(lengths, workload))
    assert len(result.ttft_s) == len(workload) and len(result.tpot_s) == sum(n > 1 for n in lengths)
    assert all(
        0 < ttft and item.arrival_s + ttft <= result.wall_s for ttft, item in zip(result.ttft_s, workload)
    )
    assert all(0 < tpot < result.wall_s for tpot in result.tpot_s)
    assert math.isclose(result.tokens_per_s, result.output_tokens / result.wall_s)
    assert result.ttft_p50 <= result.ttft_p95 <= max(result.ttft_s)
    assert result.tpot_p50 <= result.tpot_p95 <= max(result.tpot_s)


@pytest.mark.parametrize("staggered", [False, True])
def test_three_runners_agree_token_for_token(tiny, tokenizer, one_thread, staggered):
    workload = make_workload(tokenizer, 6, staggered=staggered, max_new_tokens=(3, 9), mean_gap_s=0.02)
    results = [
        run_one_at_a_time(tiny, tokenizer, workload),
        run_static_batches(tiny, tokenizer, workload, batch_size=4),
        run_continuous(tiny, tokenizer, workload, max_num_seqs=4),
    ]
    expected = tuple(
        tuple(labkit.generate_ids(tiny, tokenizer, item.prompt_ids, max_new_tokens=item.max_new_tokens))
        for item in workload
    )
    for result in results:
        assert result.token_ids == expected, result.name
        check_consistent(result, workload)
    assert len(set(expected)) > 3  # not one repeated answer
    if staggered:  # nothing can start before it arrives
        assert all(result.wall_s > workload[-1].arrival_s for result in results)
    table = results_table(results).splitlines()
    assert len(table) == 4 and table[1].endswith("1.00x") and "TTFT p50 ms" in table[0]
    assert results[1].waste.fed > results[1].waste.wasted > 0 and results[0].waste is None
    assert table[2].split()[-2].endswith("%") and table[1].split()[-2] == "-"  # the wasted column


def test_static_batches_wait_for_the_whole_batch(tiny, tokenizer, one_thread):
    # Request 1 asks for 1 token, request 0 for 12: in a static batch request 2 waits for request 0 to end;
    # with continuous batching it takes request 1's seat as soon as that one is done.
    workload = make_workload(tokenizer, 3, max_new_tokens=(12, 12))
    workload[1] = WorkItem(workload[1].prompt_ids, 1, 0.0)
    static = run_static_batches(tiny, tokenizer, workload, batch_size=2)
    continuous = run_continuous(tiny, tokenizer, workload, max_num_seqs=2)
    assert static.token_ids == continuous.token_ids
    # waited out request 0's 11 decode steps
    assert static.ttft_s[2] > static.ttft_s[0] + 11 * min(static.tpot_s)
    assert continuous.ttft_s[2] < static.ttft_s[2]


def test_a_padded_static_batch_equals_generate_alone_and_counts_its_waste(tiny, tokenizer, one_thread):
    # Prompts of different lengths, answers of different lengths: padding in the prefill, idle finished rows.
    prompts = [item.prompt_ids for item in make_workload(tokenizer, 3)]
    configs = [DecodingConfig(max_new_tokens=n) for n in (2, 9, 5)]
    alone = [labkit.generate_ids(tiny, tokenizer, p, c) for p, c in zip(prompts, configs)]
    batch, got, steps = StaticBatch(tiny, tokenizer, prompts, configs), [[], [], []], 0
    while not batch.done:
        for row, token_id in batch.step():
            got[row].append(token_id)
        steps += 1
    assert got == alone and len({len(p) for p in prompts}) == 3
    p, o = [len(ids) for ids in prompts], [len(ids) for ids in alone]
    assert len(set(o)) == 3 and steps == max(o)  # the batch ran until its longest answer was done
    padding, idle = sum(max(p) - n for n in p), sum(max(o) - n for n in o)  # notebook 10's wasted_slots
    assert batch.waste == Waste(fed=3 * max(p) + 3 * (max(o) - 1), padding=padding, idle=idle)
    assert planned_waste(p, o) == batch.waste  # counted from the lengths before running, as notebook 10 does
    assert batch.waste.wasted == padding + idle and batch.waste.share == (padding + idle) / batch.waste.fed
    with pytest.raises(RuntimeError, match="done"):
        batch.step()


def test_slot_waste_by_hand():
    assert slot_waste([5, 3, 1], [True, True, False]) == Waste(fed=15, padding=2, idle=5)
    assert slot_waste([1, 1, 1, 1], [True, False, False, True]) == Waste(fed=4, padding=0, idle=2)
    assert Waste(10, 2, 3) + Waste(6, 1, 0) == Waste(16, 3, 3) and Waste().share == 0


def test_a_static_batch_row_stays_until_the_longest_answer(tiny, tokenizer, one_thread):
    prompts = [item.prompt_ids for item in make_workload(tokenizer, 2)]
    batch = StaticBatch(tiny, tokenizer, prompts, [DecodingConfig(max_new_tokens=n) for n in (1, 6)])
    assert [row for row, _ in batch.step()] == [0, 1]  # the prefill: both rows' first token; row 0 is done
    for _ in range(5):
        assert not batch.done and [row for row, _ in batch.step()] == [1]  # row 0 idles in its seat
    assert batch.done and batch.waste.idle == 5


def test_chunked_prefill_runner_agrees(tiny, tokenizer, one_thread):
    workload = make_workload(tokenizer, 5, max_new_tokens=(3, 9))
    chunked = run_continuous(
        tiny, tokenizer, workload, max_num_seqs=5, chunked_prefill=True, max_num_batched_tokens=24
    )
    assert (
        chunked.token_ids == run_one_at_a_time(tiny, tokenizer, workload).token_ids
        and "chunked" in chunked.name
    )
    check_consistent(chunked, workload)
