"""The serving engine: batched output equals `labkit.generate` on each prompt alone (batch invariance),
with preemption and prefix caching, and bad input is refused at the door."""

import pytest
import torch

import labkit
from labkit.decoding.generate import generate
from labkit.serving.admission import EngineBusy
from labkit.serving.engine import Engine
from labkit.serving.http.app import window_blocks
from labkit.serving.http.server_metrics import ServerMetrics

from .conftest import run_staggered

# Batched vs alone: the same arithmetic on the same numbers, but in other shapes (more rows, keys padded
# to the longest row and masked), so a matmul kernel may sum in another order. On tiny() (logits of
# order 1, float32) that moves logits by ~1e-6; 1e-4 leaves room for other CPUs' kernels while still
# catching any real mistake (a wrong position, a key from another row: differences of order 0.1-1).
TINY_ATOL = 1e-4

PROMPTS = [
    "Hi",
    "The sea is",
    "Once upon a time, in a land far away,",
    "A",
    "Write a haiku about the autumn moon over the quiet mountain lake.",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16",
    "The capital of France is",
    "Question: what is two plus two? Answer:",
    "def fibonacci(n):",
    "Dear friend,",
]
NEW_TOKENS = [5, 9, 3, 12, 7, 4, 10, 6, 8, 11]


def options(index):
    """Plain greedy for even requests; a repetition penalty for odd ones, so tokens vary and the
    per-request transforms (which look at each row's own ids) are exercised."""
    return {} if index % 2 == 0 else {"repetition_penalty": 1.5}


def alone(model, tokenizer, prompt, **opts):
    steps = list(generate(model, tokenizer, prompt, return_logits=True, **opts))
    return [s.token_id for s in steps], torch.stack([s.logits for s in steps])


def assert_all_free(engine):
    engine.block_manager.check()
    assert engine.pool.allocator.n_used == 0  # named blocks stay cached, free
    assert engine.block_manager.n_cached_free == len(engine.block_manager.hash_to_block)


def test_batch_invariance_greedy_tokens_and_logits(tiny, tokenizer, one_thread):
    requests = [(p, {"max_new_tokens": n, **options(i)}) for i, (p, n) in enumerate(zip(PROMPTS, NEW_TOKENS))]
    engine = Engine(tiny, tokenizer, max_num_seqs=6, record_logits=True)
    ids = run_staggered(engine, requests, arrivals=[0, 0, 0, 1, 2, 2, 4, 5, 7, 9])
    assert max(m.batch_size for m in engine.step_metrics) >= 4  # they really shared forward passes
    for request_id, (prompt, opts) in zip(ids, requests):
        tokens, logits = alone(tiny, tokenizer, prompt, **opts)
        seq = engine.requests[request_id]
        assert seq.output_ids == tokens, prompt
        assert (torch.stack(seq.logits) - logits).abs().max() < TINY_ATOL
        assert seq.finish_reason == "length"
    assert len({tuple(engine.requests[i].output_ids) for i in ids}) > 5  # not one repeated answer
    assert_all_free(engine)


def test_seeded_sampling_does_not_depend_on_the_batch(tiny, tokenizer, one_thread):
    sampled = {"temperature": 1.0, "top_k": 20, "seed": 123, "max_new_tokens": 12}
    expected = labkit.generate_ids(tiny, tokenizer, "The sea is", **sampled)
    solo = Engine(tiny, tokenizer)
    solo_id = solo.add_request("The sea is", **sampled)
    solo.run_until_done()
    crowd = Engine(tiny, tokenizer, max_num_seqs=4)
    others = [
        crowd.add_request(p, temperature=1.0, seed=i, max_new_tokens=9) for i, p in enumerate(PROMPTS[:3])
    ]
    crowd.step()  # the request joins a batch already decoding
    crowd_id = crowd.add_request("The sea is", **sampled)
    crowd.add_request(PROMPTS[4], max_new_tokens=5)
    crowd.run_until_done()
    assert solo.requests[solo_id].output_ids == expected == crowd.requests[crowd_id].output_ids
    assert len(set(expected)) > 3  # a real sample, not a constant
    assert len({tuple(crowd.requests[i].output_ids) for i in others}) == 3


def test_small_pool_preempts_and_outputs_stay_identical(tiny, tokenizer, one_thread):
    # 6 requests of up to 31 tokens each in a pool of 40: admitted while their prompts fit, they then
    # grow until one of them finds no free block and the newest is sent back to be recomputed.
    prompts = PROMPTS[:4] + PROMPTS[6:8]
    requests = [(p, {"max_new_tokens": 20 - i, **options(i)}) for i, p in enumerate(prompts)]
    engine = Engine(tiny, tokenizer, max_num_seqs=4, n_blocks=10, block_size=4)
    ids = run_staggered(engine, requests, arrivals=[0, 0, 1, 1, 2, 3])
    assert engine.scheduler.n_preemptions > 0
    for request_id, (prompt, opts) in zip(ids, requests):
        assert engine.requests[request_id].output_ids == labkit.generate_ids(tiny, tokenizer, prompt, **opts)
    assert_all_free(engine)


def test_shared_system_prompt_uses_fewer_blocks(tiny, tokenizer, one_thread):
    system = "You are a helpful assistant. Answer briefly and politely, in one sentence. "
    questions = ["What is the sea?", "Why is the sky blue?", "Name a prime number."]
    engine = Engine(tiny, tokenizer, max_num_seqs=4, block_size=4)
    ids = [engine.add_request(system + q, max_new_tokens=6) for q in questions]
    engine.step()  # all three prompts admitted and prefilled together
    unshared = sum(-(-len(engine.requests[i]) // 4) for i in ids)
    assert engine.pool.allocator.n_used < unshared
    assert engine.block_manager.hit_rate > 0
    engine.run_until_done()
    for request_id, question in zip(ids, questions):
        expected = labkit.generate_ids(tiny, tokenizer, system + question, max_new_tokens=6)
        assert engine.requests[request_id].output_ids == expected
    assert_all_free(engine)


def test_eos_and_stop_end_one_sequence_only(tiny, tokenizer, one_thread):
    stop_text = labkit.generate_text(tiny, tokenizer, "Dear friend,", max_new_tokens=3)[-2:]
    engine = Engine(tiny, tokenizer)
    plain = engine.add_request("The sea is", max_new_tokens=8)
    eos = engine.add_request("Hi", max_new_tokens=8, logit_bias={tokenizer.eos_token_id: 100.0})
    stop = engine.add_request("Dear friend,", max_new_tokens=8, stop=[stop_text])
    outputs = engine.run_until_done()
    reasons = {out.request_id: out.finish_reason for out in outputs if out.finish_reason is not None}
    assert reasons == {plain: "length", eos: "eos", stop: "stop"}
    assert engine.requests[eos].output_ids == [tokenizer.eos_token_id]
    assert stop_text not in "".join(out.text for out in outputs if out.request_id == stop)
    assert engine.requests[plain].output_ids == labkit.generate_ids(
        tiny, tokenizer, "The sea is", max_new_tokens=8
    )


def test_generate_batch_and_metrics(tiny, tokenizer, one_thread):
    engine = Engine(tiny, tokenizer, max_num_seqs=2)
    texts = engine.generate_batch(PROMPTS[:3], max_new_tokens=4)
    assert texts == [labkit.generate_text(tiny, tokenizer, p, max_new_tokens=4) for p in PROMPTS[:3]]
    metrics = engine.metrics(2)  # the third request waited for a free seat
    assert metrics.output_tokens == 4 and metrics.queue_s > 0
    # the prefill after the queue
    assert 0 <= metrics.queue_s < metrics.ttft_s <= metrics.e2e_s and metrics.tpot_s > 0
    first = engine.metrics(0)
    assert first.queue_s < first.ttft_s and first.queue_s < metrics.queue_s  # admitted at the first step
    assert {m.kind for m in engine.step_metrics} == {"prefill", "decode"}
    assert max(m.batch_size for m in engine.step_metrics) == 2


def test_abort_frees_blocks_and_finished_abort_is_a_noop(tiny, tokenizer, one_thread):
    engine = Engine(tiny, tokenizer)
    done = engine.add_request("Hi", max_new_tokens=1)
    running = engine.add_request("The sea is", max_new_tokens=50)
    waiting = engine.add_request("A", max_new_tokens=5)
    engine.step()
    engine.abort(done)  # already finished: nothing changes
    assert engine.requests[done].finish_reason == "length"
    engine.abort(running)
    engine.abort(waiting)
    assert engine.requests[running].finish_reason == "abort" and not engine.has_unfinished()
    assert_all_free(engine)
    with pytest.raises(KeyError, match="No request with id 99"):
        engine.abort(99)


def test_bad_input_is_refused(tiny, tokenizer):
    engine = Engine(tiny, tokenizer, n_blocks=4, block_size=4)
    with pytest.raises(ValueError, match="context"):
        engine.add_request([5] * 600, max_new_tokens=4)
    with pytest.raises(ValueError, match="whole pool has 4"):
        engine.add_request([5] * 15, max_new_tokens=4)  # 19 tokens: 5 blocks of 4
    with pytest.raises(TypeError, match="unknown option"):
        engine.add_request("Hi", temprature=1.0)
    with pytest.raises(ValueError, match="beam search"):
        engine.add_request("Hi", num_beams=2)
    assert not engine.has_unfinished() and engine.requests == {}
    with pytest.raises(ValueError, match="max_num_seqs"):
        Engine(tiny, tokenizer, max_num_seqs=0)
    with pytest.raises(ValueError, match="n_blocks"):
        Engine(tiny, tokenizer, n_blocks=0)
    with pytest.raises(TypeError, match="impl='labkit'"):
        Engine(labkit.tiny_model("transformers"), tokenizer)


@pytest.mark.parametrize("budget, chunk", [(8, None), (12, 3)])
def test_chunked_prefill_keeps_tokens_and_logits_of_each_prompt_alone(
    tiny, tokenizer, one_thread, budget, chunk
):
    requests = [(p, {"max_new_tokens": n, **options(i)}) for i, (p, n) in enumerate(zip(PROMPTS, NEW_TOKENS))]
    engine = Engine(
        tiny,
        tokenizer,
        max_num_seqs=6,
        max_num_batched_tokens=budget,
        chunked_prefill=True,
        prefill_chunk=chunk,
        record_logits=True,
    )
    ids = run_staggered(engine, requests, arrivals=[0, 0, 0, 1, 2, 2, 4, 5, 7, 9])
    kinds = {m.kind for m in engine.step_metrics}
    assert "mixed" in kinds and max(m.n_tokens for m in engine.step_metrics) <= budget
    # some prompts really took several steps
    assert any(len(tokenizer(p).input_ids) > budget for p in PROMPTS)
    for request_id, (prompt, opts) in zip(ids, requests):
        tokens, logits = alone(tiny, tokenizer, prompt, **opts)
        seq = engine.requests[request_id]
        assert seq.output_ids == tokens, prompt
        assert (torch.stack(seq.logits) - logits).abs().max() < TINY_ATOL
    assert_all_free(engine)


def test_chunked_prefill_with_preemption_and_aborts_leaks_nothing(tiny, tokenizer, one_thread):
    prompts = PROMPTS[:4] + PROMPTS[6:8]
    requests = [(p, {"max_new_tokens": 20 - i, **options(i)}) for i, p in enumerate(prompts)]
    engine = Engine(
        tiny,
        tokenizer,
        max_num_seqs=4,
        n_blocks=10,
        block_size=4,
        max_num_batched_tokens=6,
        chunked_prefill=True,
    )
    ids = run_staggered(engine, requests, arrivals=[0, 0, 1, 1, 2, 3])
    assert engine.scheduler.n_preemptions > 0
    for request_id, (prompt, opts) in zip(ids, requests):
        assert engine.requests[request_id].output_ids == labkit.generate_ids(tiny, tokenizer, prompt, **opts)
    long = engine.add_request(PROMPTS[4], max_new_tokens=4)  # 14 prompt tokens, fed at most 6 a step
    engine.step()
    assert 0 < engine.requests[long].num_cached_tokens < len(engine.requests[long])  # half prefilled ...
    engine.abort(long)  # ... and aborted: its blocks come back
    engine.scheduler.check()
    assert_all_free(engine)


def test_a_finished_requests_prefix_is_reused_by_a_later_one(tiny, tokenizer, one_thread):
    system = "You are a helpful assistant. Answer briefly and politely, in one sentence. "
    engine = Engine(tiny, tokenizer, max_num_seqs=2, block_size=4)
    first = engine.add_request(system + "What is the sea?", max_new_tokens=5)
    engine.run_until_done()  # finished: its blocks are free, and still named
    assert engine.load().blocks_used == 0 and engine.load().blocks_cached > 0
    second = engine.add_request(system + "Why is the sky blue?", max_new_tokens=5)
    engine.step()
    prompt_tokens = len(engine.requests[second].prompt_ids)
    # the shared system prompt was not recomputed
    assert engine.step_metrics[-1].n_tokens < prompt_tokens // 2
    assert engine.load().prefix_hit_rate > 0
    engine.run_until_done()
    for request_id, question in ((first, "What is the sea?"), (second, "Why is the sky blue?")):
        expected = labkit.generate_ids(tiny, tokenizer, system + question, max_new_tokens=5)
        assert engine.requests[request_id].output_ids == expected
    assert_all_free(engine)


def test_engine_reports_its_load_and_turns_requests_away_when_its_queue_is_full(tiny, tokenizer):
    engine = Engine(tiny, tokenizer, max_num_seqs=1, max_waiting=1)
    engine.add_request("Hi", max_new_tokens=3)  # a free seat
    engine.add_request("The sea is", max_new_tokens=3)  # waits (1 beyond the free seats)
    with pytest.raises(EngineBusy, match="at most 1 may wait"):
        engine.add_request("A", max_new_tokens=3)
    load = engine.load()
    assert (load.running, load.waiting, load.free_seats) == (0, 2, 1)
    engine.step()
    assert (engine.load().running, engine.load().free_seats) == (1, 0) and engine.load().blocks_used > 0
    # one pool: nothing about a sliding-window pool, on the load, the step, /health or /metrics
    assert engine.load().window_blocks_total is None and engine.step_metrics[-1].window_blocks_used is None
    assert window_blocks(engine.load()) == {}
    metrics = ServerMetrics()
    metrics.set_load(1, 1, engine.load().blocks_used, engine.load().blocks_total)
    assert b"window" not in metrics.render()
