"""Speculative decoding in the serving engine (prompt lookup drafts, verified in the batched pass): greedy
output is `labkit.generate`'s exactly, sampled output follows the target's distribution (a chi-square test
with a stated false-alarm rate), rejected drafts' blocks come back, and bad settings are refused."""

import dataclasses
import math

import pytest
import torch

import labkit
from labkit.decoding.config import DecodingConfig
from labkit.decoding.transforms import apply_transforms
from labkit.serving.block_manager import chain_hashes
from labkit.serving.engine import Engine
from labkit.serving.request import EngineRequest
from labkit.serving.speculation import (
    PRIOR_TOKEN_COST,
    Speculation,
    StepCost,
    best_draft_length,
    may_draft,
)

from .conftest import run_staggered

TINY_ATOL = 1e-4  # batched vs alone on tiny() (see test_engine.py): packed drafts move logits by ~1e-6
FALSE_ALARM = 1e-3  # the chi-square test wrongly fails a correct engine 0.1% of the time (seeds fixed: never)
EOS = 2  # SmolLM2's <|im_end|>, the tiny model's end of sequence

# The tiny random model's greedy output repeats one token, so prompt lookup drafts are kept; a
# repetition penalty or no_repeat_ngram_size makes it reject them (rollback); "x y z 287 EOS e f g" with
# EOS and token 287 favoured drafts EOS after 287, kept as a draft: the run ends there.
REQUESTS = [
    ("a b c d a b c d a b c d", {"max_new_tokens": 20}),
    ("The sea is", {"max_new_tokens": 14, "repetition_penalty": 1.5}),
    ("1, 2, 3, 1, 2, 3, 1, 2, 3", {"max_new_tokens": 17}),
    ("Once upon a time, in a land far away,", {"max_new_tokens": 12, "no_repeat_ngram_size": 2}),
    ("Dear friend,", {"max_new_tokens": 9, "stop": [" d d"]}),
    ("Question: what is two plus two? Answer:", {"max_new_tokens": 16, "logprobs": 1}),
    (
        [104, 329, 1892, 287, EOS, 297, 275, 310],
        {"max_new_tokens": 9, "min_new_tokens": 1, "logit_bias": {287: 50.0, EOS: 100.0}},
    ),
    ("Hi", {"max_new_tokens": 1}),
]
ARRIVALS = [0, 0, 1, 1, 2, 3, 5, 6]


def alone(model, tokenizer, prompt, options):
    """(token ids, logits [n, V], text, finish reason) of `labkit.generate` on the prompt alone."""
    options = {k: v for k, v in options.items() if k != "logprobs"}
    steps = list(labkit.generate(model, tokenizer, prompt, return_logits=True, **options))
    finish = steps[-1].finish_reason if steps else "length"
    return (
        [s.token_id for s in steps],
        torch.stack([s.logits for s in steps]),
        "".join(s.text for s in steps),
        finish,
    )


def assert_all_free(engine):
    engine.scheduler.check()
    assert engine.pool.allocator.n_used == 0  # named blocks stay cached, free
    assert engine.block_manager.n_cached_free == len(engine.block_manager.hash_to_block)


def assert_named_blocks_are_real(engine, ids):
    """Every block named for the prefix cache holds tokens some request really has there (never a draft)."""
    real = {
        h
        for i in ids
        for h, _ in chain_hashes(engine.requests[i].token_ids + [0], engine.block_manager.block_size)
    }
    assert set(engine.block_manager.hash_to_block) <= real


ENGINES = {
    "prefill first": {"max_num_seqs": 4},
    "chunked prefill": {
        "max_num_seqs": 4,
        "chunked_prefill": True,
        "max_num_batched_tokens": 12,
        "prefill_chunk": 5,
    },
    "small pool": {"max_num_seqs": 4, "n_blocks": 12, "block_size": 4},
    "small pool, chunked": {
        "max_num_seqs": 4,
        "n_blocks": 12,
        "block_size": 4,
        "chunked_prefill": True,
        "max_num_batched_tokens": 8,
    },
}


@pytest.mark.parametrize("setting", ENGINES)
def test_greedy_output_equals_generate_alone(tiny, tokenizer, one_thread, setting):
    speculation = Speculation(max_draft=4, adaptive=False)
    engine = Engine(tiny, tokenizer, record_logits=True, speculation=speculation, **ENGINES[setting])
    ids = run_staggered(engine, REQUESTS, ARRIVALS)  # scheduler.check() after every step
    plain = Engine(tiny, tokenizer, **ENGINES[setting])
    plain_ids = run_staggered(plain, REQUESTS, ARRIVALS)
    texts = {i: "" for i in ids}
    for request_id, plain_id, (prompt, options) in zip(ids, plain_ids, REQUESTS):
        tokens, logits, text, finish = alone(tiny, tokenizer, prompt, options)
        seq = engine.requests[request_id]
        assert seq.output_ids == tokens == plain.requests[plain_id].output_ids, prompt
        assert (torch.stack(seq.logits) - logits).abs().max() < TINY_ATOL  # each drafted position's logits
        assert seq.finish_reason == finish == plain.requests[plain_id].finish_reason
        if seq.n_logprobs is not None:
            got, want = engine.logprobs(request_id), plain.logprobs(plain_id)
            assert [g.token_id for g in got] == [w.token_id for w in want]
            assert max(abs(g.logprob - w.logprob) for g, w in zip(got, want)) < TINY_ATOL
        texts[request_id] = text
    metrics = [engine.metrics(i) for i in ids]
    assert sum(m.draft_n_accepted for m in metrics) > 20  # speculation really ran ...
    assert sum(m.draft_n - m.draft_n_accepted for m in metrics) > 0  # ... and rolled rejected drafts back
    if "small pool" not in setting:  # there, the free blocks mostly hold cached prefixes, which drafts leave
        assert metrics[6].draft_n_accepted >= 1 and metrics[6].finish_reason == "eos"  # EOS kept as a draft
    assert sum(s.accepted for s in engine.step_metrics) == sum(m.draft_n_accepted for m in metrics)
    assert max(s.n_tokens for s in engine.step_metrics) <= engine.config.max_num_batched_tokens
    assert len(engine.step_metrics) < len(plain.step_metrics)  # fewer steps for the same tokens
    if "small pool" in setting:
        assert engine.scheduler.n_preemptions > 0
    assert all(not plain.metrics(i).draft_n for i in plain_ids)
    assert_named_blocks_are_real(engine, ids)
    assert_all_free(engine)


def test_outputs_of_a_step_come_in_order_and_spell_the_text(tiny, tokenizer, one_thread):
    engine = Engine(tiny, tokenizer, speculation=Speculation(adaptive=False))
    request_id = engine.add_request("a b c d a b c d", max_new_tokens=13)
    tokens, steps = [], 0
    while engine.has_unfinished():
        outputs = engine.step()
        steps += 1
        tokens += [token_id for _, token_id, _, _ in (out[:4] for out in outputs)]
        assert all(out[0] == request_id for out in outputs)
    assert tokens == labkit.generate_ids(tiny, tokenizer, "a b c d a b c d", max_new_tokens=13)
    # 1 prefill, then 2 tokens a step: in a run of one token the latest match has 1 token after it
    assert steps == 7
    assert [s.kind for s in engine.step_metrics][:2] == ["prefill", "decode"]


def test_adaptive_draft_lengths_keep_greedy_output(tiny, tokenizer, one_thread):
    engine = Engine(tiny, tokenizer, max_num_seqs=4, speculation=Speculation(max_draft=6))
    ids = run_staggered(engine, REQUESTS, ARRIVALS)
    for request_id, (prompt, options) in zip(ids, REQUESTS):
        assert engine.requests[request_id].output_ids == alone(tiny, tokenizer, prompt, options)[0]
    assert all(0 <= engine.requests[i].drafting.k <= 6 for i in ids if engine.requests[i].drafting)
    assert_all_free(engine)


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """P(X >= the statistic) for X ~ chi-square with len(counts) - 1 degrees of freedom (every cell
    expected to hold 5 or more)."""
    expected = probs.double() * counts.sum()
    assert (expected >= 5).all()
    statistic = ((counts.double() - expected) ** 2 / expected).sum()
    return float(
        torch.special.gammaincc(torch.tensor((len(counts) - 1) / 2, dtype=torch.float64), statistic / 2)
    )


def test_sampled_tokens_follow_the_target_distribution(tiny, tokenizer, one_thread):
    # Prompt "a b c d a b c d" ends with token 287; the first sampled token is 287 about half the time, and
    # then prompt lookup drafts 287 again. The second token is then the speculative rule's: kept with
    # probability p(287), else resampled from p without 287. It must follow p at that context, as
    # choose_next would sample it (temperature 0.25, top_k 4: four tokens, none rare).
    prompt = tokenizer("a b c d a b c d").input_ids
    options = {"temperature": 0.25, "top_k": 4, "max_new_tokens": 3}
    engine = Engine(tiny, tokenizer, max_num_seqs=64, speculation=Speculation(max_draft=1, adaptive=False))
    ids = [engine.add_request(prompt, seed=seed, **options) for seed in range(1200)]
    engine.run_until_done()
    pairs = [engine.requests[i].output_ids[:2] for i in ids]
    drafted = [second for first, second in pairs if first == 287]
    assert sum(engine.metrics(i).draft_n for i in ids) == len(drafted) > 400  # a draft at each of them
    context = prompt + [287]
    with torch.no_grad():
        logits = tiny(torch.tensor([context]))[0, -1:]  # [1, V]
    transforms = DecodingConfig(**options).transforms(len(prompt), {EOS})
    p = torch.softmax(apply_transforms(logits, torch.tensor([context]), transforms), dim=-1)[0]
    support = p.nonzero().squeeze(-1)  # the top 4
    assert 287 in support.tolist() and len(support) == 4
    counts = torch.tensor([drafted.count(token) for token in support.tolist()])
    assert counts.sum() == len(drafted)  # nothing outside p's support
    assert chi_square_p_value(counts, p[support]) > FALSE_ALARM
    accepted = sum(engine.metrics(i).draft_n_accepted for i in ids)
    assert accepted == drafted.count(287)  # 287 only ever comes from a kept draft: the residual has none
    assert_all_free(engine)


def test_rejected_drafts_blocks_are_freed_at_every_step(tiny, tokenizer, one_thread):
    # no_repeat_ngram_size=2 bans what prompt lookup proposes: nearly every draft is rejected. With blocks of
    # 2 tokens a draft of 3 takes up to 2 more blocks, given back the same step.
    engine = Engine(tiny, tokenizer, block_size=2, speculation=Speculation(adaptive=False))
    manager, reserved = engine.block_manager, []
    reserve = manager.reserve_drafts

    def spy(seq, n):  # the blocks each draft takes
        reserved.append(manager.draft_blocks(seq, n)[0])  # global blocks (a Llama has no local pool)
        reserve(seq, n)

    manager.reserve_drafts = spy
    request_id = engine.add_request("a b c d a b c d a b", max_new_tokens=24, no_repeat_ngram_size=2)
    seq, rejected = engine.requests[request_id], 0
    while engine.has_unfinished():
        engine.step()
        engine.scheduler.check()
        step = engine.step_metrics[-1]
        rejected += step.drafted - step.accepted
        if not seq.is_done:  # it alone holds blocks: those of its tokens, none for a rejected draft
            assert len(seq.block_table) == engine.pool.allocator.n_used
            assert math.ceil((len(seq) - 1) / 2) <= len(seq.block_table) <= math.ceil(len(seq) / 2)
            assert seq.num_cached_tokens == len(seq) - 1
    assert rejected > 5 and max(reserved) == 2
    assert seq.output_ids == labkit.generate_ids(
        tiny, tokenizer, "a b c d a b c d a b", max_new_tokens=24, no_repeat_ngram_size=2
    )
    assert_named_blocks_are_real(engine, [request_id])
    assert_all_free(engine)
    # its blocks stay cached with its real tokens: a later request that starts with them reuses them
    prompt = seq.token_ids
    later = engine.add_request(prompt, max_new_tokens=8)
    engine.run_until_done()
    assert engine.requests[later].prefix_cached_tokens > 0
    assert engine.requests[later].output_ids == labkit.generate_ids(tiny, tokenizer, prompt, max_new_tokens=8)
    assert_all_free(engine)


def test_drafts_never_evict_a_cached_prefix(tiny, tokenizer, one_thread):
    # 16 blocks of 2 tokens: the first request leaves 7 named blocks free; the second needs 13 of its own,
    # which evict some of them (its tokens must go somewhere), while its drafts take only unnamed blocks
    engine = Engine(tiny, tokenizer, block_size=2, n_blocks=16, speculation=Speculation(adaptive=False))
    engine.add_request("a b c d a b c d a b", max_new_tokens=4)
    engine.run_until_done()
    manager, drafted = engine.block_manager, []
    assert manager.full.n_cached_free == engine.pool.allocator.n_free - manager.draft_room()[0] > 0
    reserve = manager.reserve_drafts

    def spy(seq, n):  # evictions while a draft takes its blocks
        before = manager.full.evictions
        reserve(seq, n)
        drafted.append(manager.full.evictions - before)

    manager.reserve_drafts = spy
    second = engine.add_request("d c b a d c b a d c", max_new_tokens=16)
    engine.run_until_done()
    assert drafted and set(drafted) == {0}  # drafts ran, and none evicted a prefix
    assert manager.full.evictions > 0  # the request's own tokens did
    prompt = "d c b a d c b a d c"
    assert engine.requests[second].output_ids == labkit.generate_ids(
        tiny, tokenizer, prompt, max_new_tokens=16
    )
    assert_all_free(engine)


def test_aborts_and_preemption_with_drafts_leak_nothing(tiny, tokenizer, one_thread):
    engine = Engine(
        tiny, tokenizer, max_num_seqs=4, n_blocks=14, block_size=4, speculation=Speculation(adaptive=False)
    )
    ids = [engine.add_request(prompt, **options) for prompt, options in REQUESTS[:6]]
    for _ in range(3):
        engine.step()
        engine.scheduler.check()
    engine.abort(ids[0])  # decoding, with drafts in its last step
    engine.abort(ids[5])  # still waiting
    while engine.has_unfinished():
        engine.step()
        engine.scheduler.check()
    assert engine.scheduler.n_preemptions > 0
    assert sum(engine.metrics(i).draft_n_accepted for i in ids) > 0
    for request_id, (prompt, options) in list(zip(ids, REQUESTS))[1:5]:
        assert engine.requests[request_id].output_ids == alone(tiny, tokenizer, prompt, options)[0]
    assert_all_free(engine)


def test_requests_that_may_not_draft_decode_as_without_speculation(tiny, tokenizer, one_thread):
    engine = Engine(tiny, tokenizer, speculation=Speculation(adaptive=False))
    group = engine.add_request("a b c d a b c d", max_new_tokens=10, n=2, temperature=0.5, seed=3)
    engine.run_until_done()
    plain = Engine(tiny, tokenizer)
    plain_group = plain.add_request("a b c d a b c d", max_new_tokens=10, n=2, temperature=0.5, seed=3)
    plain.run_until_done()
    for sample, plain_sample in zip(engine.samples(group), plain.samples(plain_group)):
        assert engine.metrics(sample).draft_n == 0
        assert engine.requests[sample].output_ids == plain.requests[plain_sample].output_ids
    capped = engine.add_request("a b c d a b c d", max_new_tokens=10)
    engine.requests[capped].max_draft = 0  # a request's own cap on its drafts: none
    engine.run_until_done()
    assert engine.metrics(capped).draft_n == 0
    expected = labkit.generate_ids(tiny, tokenizer, "a b c d a b c d", max_new_tokens=10)
    assert engine.requests[capped].output_ids == expected
    seq = EngineRequest(0, [1, 2, 3], DecodingConfig(max_new_tokens=4), frozenset({EOS}), tokenizer, 0.0)
    assert may_draft(seq)
    for constrained in ({"thinking_budget": 8}, {"thinking_min": 2}, {"grammar": 'start: "yes" | "no"'}):
        seq.config = dataclasses.replace(DecodingConfig(max_new_tokens=4), **constrained)
        assert not may_draft(seq), constrained


def test_draft_length_follows_acceptance_and_step_cost():
    # cheap tokens (a wide accelerator): draft all; compute-bound (each token costs a step): never
    assert best_draft_length(0.9, 4, rows=1, tokens=1, a=1.0, b=0.01) == 4
    assert best_draft_length(0.9, 4, rows=8, tokens=8, a=0.01, b=1.0) == 0
    assert best_draft_length(0.0, 4, rows=1, tokens=1, a=1.0, b=0.01) == 0  # nothing is ever kept
    assert best_draft_length(0.5, 4, rows=1, tokens=1, a=1.0, b=0.2) == 2  # E(0.5, k) saturates at 2
    cost = StepCost()
    assert cost.fit() == (1.0, PRIOR_TOKEN_COST)  # the prior before enough steps
    for n in (1, 9, 1, 4, 30, 2, 2, 5, 17):
        cost.add(n, 0.01 + 0.002 * n)
    a, b = cost.fit()
    assert a == pytest.approx(0.01) and b == pytest.approx(0.002)


def test_bad_speculation_is_refused(tiny, tokenizer):
    for bad, match in [
        ({"method": "eagle"}, "method must be one of 'ngram', 'early_exit'"),
        ({"max_draft": 0}, "max_draft must be"),
        ({"max_draft": 2.5}, "max_draft must be"),
        ({"max_draft": True}, "max_draft must be"),
        ({"min_ngram": 0}, "min_ngram must be"),
        ({"min_ngram": 4, "max_ngram": 2}, r"min_ngram \(4\) must be at most max_ngram \(2\)"),
        ({"adaptive": "yes"}, "adaptive must be True or False"),
    ]:
        with pytest.raises(ValueError, match=match):
            Speculation(**bad)
    with pytest.raises(TypeError, match="speculation must be a Speculation"):
        Engine(tiny, tokenizer, speculation="ngram")


@pytest.mark.slow  # compiles: about 10 s per batch size on 2 cores
def test_a_compiled_engine_speculates_and_keeps_greedy_output(tiny, tokenizer, one_thread):
    # steps where no row drafts run the compiled decode step; drafted steps the compiled drafted step
    engine = Engine(
        tiny, tokenizer, max_num_seqs=2, compile_decode=True, speculation=Speculation(adaptive=False)
    )
    ids = run_staggered(engine, REQUESTS[:4], [0, 0, 1, 3])
    for request_id, (prompt, options) in zip(ids, REQUESTS):
        assert engine.requests[request_id].output_ids == alone(tiny, tokenizer, prompt, options)[0]
    assert sum(engine.metrics(i).draft_n_accepted for i in ids) > 0
    assert any(s.kind == "decode" and not s.drafted for s in engine.step_metrics)  # a compiled step ran
    assert engine.runner.compiled.verify_steps > 0  # and a compiled drafted one
    assert_all_free(engine)
