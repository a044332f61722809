"""n samples of one prompt in the serving engine (`add_request(..., n=4)`): the prompt is prefilled once and
its blocks shared, every sample is exactly the request alone with seed + i (so the copy on write kept each
sample's keys its own), batch invariance holds beside other requests, aborts and preemptions leave no block
behind, the first token of every sample has the prompt's distribution (a chi-square test on the real
model), and the recorded log-probabilities are the model's own log_softmax."""

import math

import pytest
import torch

import labkit
from labkit.core.forward import all_logits
from labkit.core.paged import BlockPool
from labkit.decoding.generate import generate
from labkit.serving.engine import Engine

from .conftest import run_staggered

# Batched vs alone on tiny() (float32, logits of order 1): the same arithmetic in other shapes moves logits
# by ~1e-6; a key read from the wrong block moves them by 0.1-1 (as tests/serving/test_engine.py).
TINY_ATOL = 1e-4
FALSE_ALARM = 1e-3  # each chi-square test wrongly fails a correct engine 0.1% of the time
# log_softmax of the engine's batched logits vs one plain forward pass over the same ids, SmolLM2 float32:
# measured differences are ~1e-5 (logits reach ~30); a row from the wrong position differs by 0.1-10.
LOGPROB_ATOL = 2e-3

PROMPT = "The sea is blue and"  # 5 tokens: with blocks of 4, one full block and one partly filled
SAMPLED = {"temperature": 1.0, "top_k": 20, "max_new_tokens": 8}
OTHERS = ["Hi", "Once upon a time, in a land far away,", "Dear friend,", "The capital of France is"]


def alone(model, tokenizer, prompt, **options):
    """(tokens, logits [n, V]) of `labkit.generate` on the prompt alone."""
    steps = list(generate(model, tokenizer, prompt, return_logits=True, **options))
    return [s.token_id for s in steps], torch.stack([s.logits for s in steps])


def assert_is_alone(engine, request_id, model, tokenizer, prompt, **options):
    """The request's tokens and logits equal `generate` on its prompt alone with these options."""
    tokens, logits = alone(model, tokenizer, prompt, **options)
    seq = engine.requests[request_id]
    assert seq.output_ids == tokens, (request_id, prompt, options)
    assert (torch.stack(seq.logits) - logits).abs().max() < TINY_ATOL


def assert_samples_are_alone(engine, request_id, model, tokenizer, prompt, **options):
    """Sample i of the request is the request alone with seed + i (a greedy one: the same answer each)."""
    seed = options.pop("seed", None)
    for index, sample_id in enumerate(engine.samples(request_id)):
        seeded = {} if seed is None else {"seed": seed + index}
        assert_is_alone(engine, sample_id, model, tokenizer, prompt, **options, **seeded)


def run_checked(engine):
    """Step until done, checking every invariant after every step; (request id, sample index, whether its
    samples were still to fork) of every sequence preempted on the way."""
    preempted = []
    while engine.has_unfinished():
        engine.step()
        engine.scheduler.check()
        preempted += [(s.request_id, s.sample_index, bool(s.unforked)) for s in engine.last_batch.preempted]
    return preempted


def assert_all_free(engine):
    engine.scheduler.check()
    assert engine.pool.allocator.n_used == 0  # named blocks stay cached, free
    assert engine.block_manager.n_cached_free == len(engine.block_manager.hash_to_block)


def record_copies(engine):
    """Every (shared, private) pair the engine's pool copies from now on."""
    pairs, copy = [], engine.pool.copy_blocks
    engine.pool.copy_blocks = lambda given: (pairs.extend(given), copy(given))[1]
    return pairs


@pytest.mark.parametrize(
    "chunking", [{}, {"chunked_prefill": True, "prefill_chunk": 2}], ids=["prefill-first", "chunked"]
)
def test_the_prompt_is_prefilled_once_and_its_blocks_shared(tiny, tokenizer, one_thread, chunking):
    engine = Engine(tiny, tokenizer, max_num_seqs=4, block_size=4, record_logits=True, **chunking)
    copies = record_copies(engine)
    request_id = engine.add_request(PROMPT, n=4, seed=3, **SAMPLED)
    ids, prompt_length = engine.samples(request_id), len(engine.requests[request_id].prompt_ids)
    assert ids[0] == request_id and len(set(ids)) == 4 and prompt_length == 5
    run_checked(engine)
    outputs = [engine.requests[i].output_ids for i in ids]
    fed = sum(m.n_tokens for m in engine.step_metrics)
    assert fed == prompt_length + sum(len(o) - 1 for o in outputs)  # the prompt once, then a token per sample
    assert max(m.batch_size for m in engine.step_metrics) == 4
    # n - 1 copies of the partial block
    assert len(copies) == 3 and len({shared for shared, _ in copies}) == 1
    peak, size = max(m.blocks_used for m in engine.step_metrics), 4
    assert peak <= math.ceil(prompt_length / size) + 4 * (math.ceil(SAMPLED["max_new_tokens"] / size) + 1)
    # four requests' worth
    assert peak < 4 * math.ceil((prompt_length + SAMPLED["max_new_tokens"] - 1) / size)
    assert_samples_are_alone(engine, request_id, tiny, tokenizer, PROMPT, seed=3, **SAMPLED)
    assert len({tuple(o) for o in outputs}) == 4  # four different answers
    assert_all_free(engine)


def test_seeded_samples_are_reproducible_and_sample_0_is_the_request_of_one(tiny, tokenizer, one_thread):
    def run(n_one):
        engine = Engine(tiny, tokenizer, max_num_seqs=8)
        group = engine.add_request(PROMPT, n=4, seed=11, **SAMPLED)
        one = engine.add_request(PROMPT, seed=11, **SAMPLED) if n_one else None
        unseeded = engine.add_request(PROMPT, n=3, **SAMPLED)
        engine.run_until_done()
        answers = [engine.requests[i].output_ids for i in engine.samples(group)]
        free = [engine.requests[i].output_ids for i in engine.samples(unseeded)]
        return answers, engine.requests[one].output_ids if n_one else None, free

    answers, one, free = run(n_one=True)
    again, _, free_again = run(n_one=False)
    assert answers == again and one == answers[0]
    # Unseeded, each sample draws from its own generator: three equal 8-token answers (top-k 20) would
    # have a chance below 1e-20, and so would equal answers in two runs.
    assert len({tuple(a) for a in free}) == 3 and free != free_again


def test_without_the_copy_the_samples_read_keys_that_are_not_theirs(tiny, tokenizer, one_thread, monkeypatch):
    monkeypatch.setattr(BlockPool, "copy_blocks", lambda pool, pairs: None)  # copy on write, minus the copy
    engine = Engine(tiny, tokenizer, max_num_seqs=4, block_size=4, record_logits=True)
    request_id = engine.add_request(PROMPT, n=3, seed=3, **SAMPLED)
    engine.run_until_done()
    worst = 0.0
    for index, sample_id in enumerate(engine.samples(request_id)):
        _, logits = alone(tiny, tokenizer, PROMPT, seed=3 + index, **SAMPLED)
        seq = engine.requests[sample_id]
        steps = min(len(seq.logits), len(logits))
        worst = max(worst, float((torch.stack(seq.logits[:steps]) - logits[:steps]).abs().max()))
    assert worst > 100 * TINY_ATOL  # what the tests above would catch


def test_greedy_samples_are_n_equal_answers_equal_to_generate(tiny, tokenizer, one_thread):
    engine = Engine(tiny, tokenizer, max_num_seqs=3, block_size=4, record_logits=True)
    request_id = engine.add_request(PROMPT, n=3, max_new_tokens=9, logprobs=2)
    run_checked(engine)
    assert_samples_are_alone(engine, request_id, tiny, tokenizer, PROMPT, max_new_tokens=9)
    steps = list(labkit.generate(tiny, tokenizer, PROMPT, max_new_tokens=9))
    for sample_id in engine.samples(request_id):
        recorded = engine.logprobs(sample_id)
        assert [r.token_id for r in recorded] == [s.token_id for s in steps]
        assert max(abs(r.logprob - s.logprob) for r, s in zip(recorded, steps)) < TINY_ATOL
        # greedy: the top
        assert all(len(r.top) == 2 and abs(r.top[0][1] - r.logprob) < 1e-6 for r in recorded)
    assert_all_free(engine)


def test_a_group_among_other_requests_keeps_batch_invariance(tiny, tokenizer, one_thread):
    requests = [
        (OTHERS[0], {"max_new_tokens": 6}),
        (PROMPT, {"n": 3, "max_new_tokens": 9, "repetition_penalty": 1.5}),
        (OTHERS[1], {"max_new_tokens": 5, "temperature": 1.0, "top_k": 20, "seed": 4}),
        (OTHERS[2], {"n": 2, "temperature": 1.0, "top_k": 20, "seed": 8, "max_new_tokens": 7}),
        (OTHERS[3], {"max_new_tokens": 8, "repetition_penalty": 1.5}),
    ]
    engine = Engine(tiny, tokenizer, max_num_seqs=8, block_size=4, record_logits=True)
    ids = run_staggered(engine, requests, arrivals=[0, 0, 1, 2, 4])
    assert max(m.batch_size for m in engine.step_metrics) >= 6  # the samples shared passes with the others
    for request_id, (prompt, options) in zip(ids, requests):
        options = {k: v for k, v in options.items() if k != "n"}
        assert_samples_are_alone(engine, request_id, tiny, tokenizer, prompt, **options)
    assert_all_free(engine)


def test_preemptions_and_aborts_leave_no_block_behind(tiny, tokenizer, one_thread):
    greedy, sampled = (
        {"max_new_tokens": 14, "repetition_penalty": 1.5},
        {**SAMPLED, "max_new_tokens": 14, "seed": 5},
    )
    engine = Engine(tiny, tokenizer, max_num_seqs=6, n_blocks=14, block_size=4, record_logits=True)
    drawn, kept = engine.add_request(PROMPT, n=3, **sampled), engine.add_request(OTHERS[2], **greedy)
    group, lonely = engine.add_request(OTHERS[3], n=2, **greedy), engine.add_request(OTHERS[0], n=2, **greedy)
    for _ in range(4):
        engine.step()
    engine.abort(group)  # sample 0's id: the whole group
    engine.abort(engine.samples(lonely)[1])  # a later sample's id: that sample alone
    preempted = run_checked(engine)
    # a forked sample was preempted, recomputed from prompt + output, and drew on with its own generator
    assert any(index > 0 and request_id in engine.samples(drawn) for request_id, index, _ in preempted)
    assert [engine.requests[i].finish_reason for i in engine.samples(group)] == ["abort", "abort"]
    assert [engine.requests[i].finish_reason for i in engine.samples(lonely)] == ["length", "abort"]
    assert_samples_are_alone(engine, drawn, tiny, tokenizer, PROMPT, **sampled)
    assert_is_alone(engine, kept, tiny, tokenizer, OTHERS[2], **greedy)
    assert_is_alone(engine, lonely, tiny, tokenizer, OTHERS[0], **greedy)
    assert_all_free(engine)


def test_a_group_preempted_before_its_fork_forks_later(tiny, tokenizer, one_thread):
    # The schedule of tests/serving/test_block_manager_fork.py: a long decode grows while the group's
    # prompt goes in chunks of one token, in 5 blocks of 2, and preempts it before its prompt is done.
    engine = Engine(
        tiny,
        tokenizer,
        max_num_seqs=3,
        n_blocks=5,
        block_size=2,
        max_num_batched_tokens=3,
        chunked_prefill=True,
        prefill_chunk=1,
        record_logits=True,
    )
    long = engine.add_request([504], max_new_tokens=8)
    group = engine.add_request([50, 51, 52, 53, 54], n=2, max_new_tokens=3)
    preempted = run_checked(engine)
    assert (group, 0, True) in preempted  # sample 0, while its prompt was still being prefilled
    assert_is_alone(engine, long, tiny, tokenizer, [504], max_new_tokens=8)
    assert_samples_are_alone(engine, group, tiny, tokenizer, [50, 51, 52, 53, 54], max_new_tokens=3)
    assert_all_free(engine)


def test_samples_abort_release_and_logprobs_speak_for_the_group(tiny, tokenizer):
    engine = Engine(tiny, tokenizer, max_num_seqs=4)
    request_id = engine.add_request(PROMPT, n=3, max_new_tokens=4)
    ids = engine.samples(request_id)
    # seated as one, before its prefill
    assert engine.samples(ids[2]) == ids and engine.requests[request_id].seats == 3
    engine.abort(ids[2])  # before the fork: it never runs, and gives its seat back
    assert engine.requests[ids[2]].finish_reason == "abort" and engine.requests[request_id].seats == 2
    engine.step()  # the prefill: samples 0 and 1 decode on
    assert len(engine.scheduler.running) == 2 and engine.load().free_seats == 2
    assert engine.requests[ids[2]].output_ids == [] and len(engine.requests[ids[1]].output_ids) == 1
    with pytest.raises(KeyError, match=rf"\({request_id}: it is still running\)"):
        engine.release(request_id)
    engine.abort(ids[1])  # a later sample alone
    assert engine.release(ids[1]).finish_reason == "abort" and ids[1] not in engine.requests
    engine.run_until_done()
    # the rest of its group
    assert engine.release(request_id).finish_reason == "length" and engine.requests == {}
    with pytest.raises(ValueError, match="added without logprobs"):
        engine.logprobs(engine.add_request(PROMPT, max_new_tokens=1))
    nothing = engine.add_request(PROMPT, n=2, max_new_tokens=0)  # done on arrival, as generate() would be
    assert [engine.requests[i].finish_reason for i in engine.samples(nothing)] == ["length", "length"]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"n": 0}, "n must be a whole number of 1 or more"),
        ({"n": 2.0}, "n must be a whole number"),
        ({"n": True}, "n must be a whole number"),
        ({"n": 5}, "n must be at most 4 .* the 5 samples share one prefill, so they need 5 seats"),
        ({"n": 2, "num_beams": 2}, "beam search"),
        ({"logprobs": 21}, "logprobs must be a whole number from 0 to 20"),
        ({"logprobs": -1}, "logprobs must be"),
        ({"logprobs": 1.5}, "logprobs must be"),
        ({"n": 3, "max_new_tokens": 4}, "whole pool has 4"),
    ],
)
def test_bad_n_and_logprobs_are_refused(tiny, tokenizer, options, message):
    engine = Engine(tiny, tokenizer, max_num_seqs=4, n_blocks=4, block_size=4)
    with pytest.raises(ValueError, match=message):
        engine.add_request([5] * 12, **options)  # 12 prompt tokens: 3 blocks, and one per later sample
    assert not engine.has_unfinished() and engine.requests == {}


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """P(X >= observed) for X ~ chi-square with (cells - 1) degrees of freedom (as tests/speculative):
    cells expected to hold fewer than 5 draws are pooled into one."""
    expected, counts = probs.double() * counts.sum(), counts.double()
    small = expected < 5
    counts = torch.cat([counts[~small], counts[small].sum()[None]])
    expected = torch.cat([expected[~small], expected[small].sum()[None]])
    statistic = ((counts - expected) ** 2 / expected.clamp(min=1e-12)).sum()
    return float(
        torch.special.gammaincc(torch.tensor((len(counts) - 1) / 2, dtype=torch.float64), statistic / 2)
    )


@pytest.mark.slow
def test_every_samples_first_token_has_the_prompts_distribution(smollm2_labkit, tokenizer):
    prompt, n, groups = labkit.encode_prompt(tokenizer, "My favourite colour is"), 4, 128
    logits = all_logits(smollm2_labkit, prompt)[-1]
    probs = torch.softmax(logits, dim=-1)  # the request of one's: temperature 1, nothing else
    # 64 groups a step: two forward passes (each reads every weight once, whatever its rows) and 512 draws.
    engine = Engine(smollm2_labkit, tokenizer, max_num_seqs=4 * 64, n_blocks=64)
    ids = [
        engine.add_request(prompt, n=n, temperature=1.0, seed=g * n, max_new_tokens=1) for g in range(groups)
    ]
    engine.run_until_done()
    assert sum(m.n_tokens for m in engine.step_metrics) == groups * len(prompt)  # one prefill per group (no
    # prefix cache hit either: the prompt is shorter than a block)
    # [G, n]
    firsts = torch.tensor([[engine.requests[i].output_ids[0] for i in engine.samples(r)] for r in ids])
    for index in range(n):
        counts = torch.bincount(firsts[:, index], minlength=len(probs)).float()
        assert chi_square_p_value(counts, probs) > FALSE_ALARM, f"sample {index}"
    colder = torch.softmax(logits / 0.5, dim=-1)
    pooled = torch.bincount(firsts.flatten(), minlength=len(probs)).float()
    assert chi_square_p_value(pooled, colder) < FALSE_ALARM  # the test tells temperature 0.5 from 1


@pytest.mark.slow
def test_logprobs_are_the_log_softmax_of_labkits_own_forward_pass(smollm2_labkit, tokenizer):
    prompt = labkit.chat_prompt(tokenizer, "Name a colour.")
    engine = Engine(smollm2_labkit, tokenizer, max_num_seqs=4, n_blocks=16)
    request_id = engine.add_request(
        prompt, n=2, logprobs=5, temperature=0.8, top_p=0.9, repetition_penalty=1.3, seed=0, max_new_tokens=6
    )
    engine.add_request("The sea is", max_new_tokens=6)  # in the same batch
    engine.run_until_done()
    for sample_id in engine.samples(request_id):
        seq = engine.requests[sample_id]
        reference = torch.log_softmax(all_logits(smollm2_labkit, seq.token_ids)[len(prompt) - 1 : -1], dim=-1)
        recorded = engine.logprobs(sample_id)
        assert [r.token_id for r in recorded] == seq.output_ids
        for row, r in zip(reference, recorded):
            # the raw distribution, not the penalised one
            assert abs(r.logprob - row[r.token_id]) < LOGPROB_ATOL
            values = [value for _, value in r.top]
            assert len(r.top) == 5 and values == sorted(values, reverse=True)
            assert all(abs(value - row[token]) < LOGPROB_ATOL for token, value in r.top)
            # no unlisted token beats the 5th listed
            assert row.topk(5).values[-1] < values[-1] + LOGPROB_ATOL
