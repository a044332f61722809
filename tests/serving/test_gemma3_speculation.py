"""Speculation in the engine on labkit's Gemma3: a draft takes slots in both pools, the global one and the
local layers' window pool, and a rejected draft gives both back (labkit.serving.draft_slots). A tiny Gemma 3
(random weights, window of 4 keys) with prompt-lookup drafts gives exactly what `labkit.generate` gives on
each prompt alone, with staggered arrivals, chunked prefill and preemption, the block manager's invariants
checked after every step (a window table that kept a rejected draft's block, or released a block its window
still sees, fails them)."""

import pytest
import torch

from labkit.core.gemma3 import Gemma3
from labkit.serving.engine import Engine
from labkit.serving.speculation import Speculation

from .conftest import compare, run_staggered
from .test_engine_gemma3 import TINY_ATOL, alone

# Prompts longer than the tiny window, several with repeats for prompt lookup to find; a repetition penalty
# or no_repeat_ngram_size makes the target reject what was drafted (rollback in both pools).
REQUESTS = [
    ("a b c d a b c d a b c d", {"max_new_tokens": 16}),
    ("The sea is deep and the sea is", {"max_new_tokens": 12, "repetition_penalty": 1.5}),
    ("1, 2, 3, 1, 2, 3, 1, 2, 3", {"max_new_tokens": 14}),
    ("Once upon a time, in a land far away,", {"max_new_tokens": 10, "no_repeat_ngram_size": 2}),
    ("x y z x y z x y z x y", {"max_new_tokens": 9}),
]
ARRIVALS = [0, 0, 1, 2, 3]
ENGINES = {
    "prefill first": {"max_num_seqs": 4},
    "chunked prefill": {"max_num_seqs": 4, "chunked_prefill": True, "max_num_batched_tokens": 10},
    "small pool": {"max_num_seqs": 4, "n_blocks": 14, "block_size": 4},
}


@pytest.mark.parametrize("setting", ENGINES)
def test_greedy_output_equals_generate_alone_and_both_pools_roll_back(
    tiny_gemma3, gemma_tokenizer, one_thread, setting
):
    speculation = Speculation(max_draft=4, adaptive=False)
    engine = Engine(
        tiny_gemma3, gemma_tokenizer, record_logits=True, speculation=speculation, **ENGINES[setting]
    )
    ids = run_staggered(engine, REQUESTS, ARRIVALS)  # the scheduler's and block manager's checks every step
    for request_id, (prompt, options) in zip(ids, REQUESTS):
        tokens, logits = alone(tiny_gemma3, gemma_tokenizer, prompt, **options)
        seq = engine.requests[request_id]
        assert seq.output_ids == tokens, prompt
        assert (torch.stack(seq.logits) - logits).abs().max() < TINY_ATOL, prompt
    metrics = [engine.metrics(i) for i in ids]
    assert sum(m.draft_n_accepted for m in metrics) > 10  # drafts were kept ...
    assert sum(m.draft_n - m.draft_n_accepted for m in metrics) > 0  # ... and rejected ones rolled back
    if "small pool" in setting:
        assert engine.scheduler.n_preemptions > 0
    engine.block_manager.check()
    assert engine.pool.allocator.n_used == 0
    assert engine.pools.window.allocator.n_used == 0


def test_a_drafted_step_holds_local_blocks_for_its_drafts_and_gives_back_the_rejected(
    tiny_gemma3, gemma_tokenizer, one_thread
):
    # Blocks of 2 tokens: a draft of 4 takes up to 2 more blocks in each pool for the step. After it, the
    # window table holds the blocks of the tokens kept and no more, each pool's count back where a plain
    # decode would leave it.
    engine = Engine(
        tiny_gemma3, gemma_tokenizer, block_size=2, speculation=Speculation(max_draft=4, adaptive=False)
    )
    manager, during = engine.block_manager, []
    reserve = manager.reserve_drafts

    def reserve_and_look(seq, n):
        reserve(seq, n)
        during.append((len(seq), n, len(seq.block_table), len(seq.window_table)))

    manager.reserve_drafts = reserve_and_look
    request_id = engine.add_request("a b c d a b c d a b c d", max_new_tokens=20, no_repeat_ngram_size=3)
    while engine.has_unfinished():
        engine.step()
        manager.check()
        seq = engine.requests[request_id]
        if not seq.is_done:
            cached, length = -(-seq.num_cached_tokens // 2), -(-len(seq) // 2)  # blocks of each
            assert len(seq.window_table) == len(seq.block_table) and cached <= len(seq.block_table) <= length
    assert during, "drafts were fed"
    for length, n, full, local in during:
        assert full == local == -(-(length + n) // 2)  # both tables cover the drafts while they are verified
    assert engine.metrics(request_id).draft_n > engine.metrics(request_id).draft_n_accepted  # rejections
    assert engine.pool.allocator.n_used == engine.pools.window.allocator.n_used == 0


COPY = "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. Actions speak louder than words."


@pytest.mark.slow
def test_gemma3_270m_speculates_on_a_copy_and_keeps_generates_tokens(gemma3):
    # Asked to repeat a text it has already repeated once, the real model's answer is in its prompt: prompt
    # lookup drafts it and the model keeps them (measured: 29 of 29 kept, 11 steps for 40 tokens against 40).
    hf, tokenizer = gemma3
    model = Gemma3.from_hf(hf)
    prompt = f"Repeat this text exactly.\nText: {COPY}\nRepeat: {COPY}\nText: {COPY}\nRepeat:"
    prompts = [tokenizer(prompt).input_ids, tokenizer("The capital of France is").input_ids]
    engine = Engine(
        model, tokenizer, max_num_seqs=2, record_logits=True, speculation=Speculation(max_draft=4)
    )
    ids = run_staggered(engine, [(p, {"max_new_tokens": 24}) for p in prompts], [0, 1])
    found = [compare(engine, i, model, tokenizer, p, 24) for i, p in zip(ids, prompts)]
    assert sum(f[0] for f in found) >= 0.9 * sum(f[1] for f in found), "near-ties: pick other prompts"
    assert engine.metrics(ids[0]).draft_n_accepted >= 10
    assert engine.pool.allocator.n_used == engine.pools.window.allocator.n_used == 0
