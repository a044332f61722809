"""A Gemma3's sliding-window layers' pool sized by `default_window_blocks` (local blocks taken one scheduled
chunk at a time): much smaller than the global pool, never short of what the global pool admits, and the
engine still gives what `labkit.generate` gives on each prompt alone, with staggered long prompts, chunked
and prefill-first scheduling, preemption, n samples and a prefix hit."""

import random

import pytest
import torch

import labkit
from labkit.core.gemma3 import Gemma3, Gemma3Config
from labkit.core.llama import Llama, LlamaConfig
from labkit.serving.capacity import default_window_blocks, window_pool_size
from labkit.serving.engine import Engine
from labkit.serving.layer_pools import LayerPools
from labkit.serving.scheduler import SchedulerConfig

from .test_engine_gemma3 import PROMPTS, TINY_ATOL, requests_of

LONG = [p + " " + q for p, q in zip(PROMPTS, reversed(PROMPTS))]  # 14 to 38 tokens, window 4
POLICIES = [
    {"max_num_batched_tokens": 64, "n_blocks": 32},
    {"chunked_prefill": True, "max_num_batched_tokens": 12, "prefill_chunk": 7, "n_blocks": 24},
]


def run_checked(engine, requests, arrivals):
    """requests[i] = (prompt, options, n) added once arrivals[i] steps ran; check() after every step; the
    local pool's peak use. Returns (ids, peak)."""
    ids, step, peak = [], 0, 0
    while len(ids) < len(requests) or engine.has_unfinished():
        while len(ids) < len(requests) and arrivals[len(ids)] <= step:
            prompt, options, n = requests[len(ids)]
            ids.append(engine.add_request(prompt, n=n, **options))
        engine.step()
        engine.scheduler.check()
        peak = max(peak, engine.pools.window.allocator.n_used)
        step += 1
    return ids, peak


@pytest.mark.parametrize("policy", POLICIES, ids=["prefill-first", "chunked-prefill"])
def test_a_default_local_pool_gives_each_prompt_alone(tiny_gemma3, gemma_tokenizer, one_thread, policy):
    shared = "You are a helpful assistant. Answer briefly, in one short sentence. "
    sampled = {"temperature": 10.0, "top_k": 50, "seed": 7, "max_new_tokens": 10}
    requests = [(p, o, 1) for p, o in requests_of(LONG, [14, 9, 12, 6, 11, 8])]
    requests += [(shared + "What is the sea?", {"max_new_tokens": 6}, 1), (shared + "Why?", sampled, 3)]
    engine = Engine(tiny_gemma3, gemma_tokenizer, max_num_seqs=4, block_size=4, record_logits=True, **policy)
    local = engine.pools.window.allocator
    assert (
        local.n_blocks
        == default_window_blocks(4, 4, 4, policy["max_num_batched_tokens"], 99)
        < policy["n_blocks"]
    )
    ids, peak = run_checked(engine, requests, [0, 0, 1, 2, 2, 4, 5, 30])
    assert engine.scheduler.n_preemptions > 0 and engine.block_manager.hits > 0
    assert max(m.batch_size for m in engine.step_metrics) >= 3 and 0 < peak <= local.n_blocks
    for request_id, (prompt, options, n) in zip(ids, requests):
        for i, sample in enumerate(engine.samples(request_id)):
            seed = {"seed": options["seed"] + i} if "seed" in options else {}
            steps = list(
                labkit.generate(
                    tiny_gemma3, gemma_tokenizer, prompt, return_logits=True, **{**options, **seed}
                )
            )
            seq = engine.requests[sample]
            assert seq.output_ids == [s.token_id for s in steps], prompt
            if engine.record_logits:
                assert (
                    torch.stack(seq.logits) - torch.stack([s.logits for s in steps])
                ).abs().max() < TINY_ATOL
    assert engine.pool.allocator.n_used == local.n_used == 0


def count_local_refusals(engine):
    """Wrap the block manager's checks so that each refusal the global pool alone would not have made (the
    local pool short) is counted in engine.local_refusals."""
    manager, engine.local_refusals = engine.block_manager, 0
    admit, append, grow = manager.can_admit, manager.can_append, manager.can_grow_window

    def counted(allowed, global_allows):
        engine.local_refusals += not allowed and global_allows
        return allowed

    def can_admit(seq, limit=None):
        need = manager.needed(seq.token_ids, limit)[0] + len(seq.unforked)
        return counted(admit(seq, limit), need <= manager.full.allocator.n_free)

    def can_append(seq):
        full = manager.kinds(seq)[0]
        need = manager.needs_block(seq) or manager._shared_next(full[0], full[1], seq)
        return counted(append(seq), not need or manager.full.allocator.n_free >= 1)

    manager.can_admit, manager.can_append = can_admit, can_append
    manager.can_grow_window = lambda seq, n: counted(grow(seq, n), True)


@pytest.mark.parametrize("policy", POLICIES, ids=["prefill-first", "chunked-prefill"])
def test_the_default_bound_is_never_short(tiny_gemma3, gemma_tokenizer, one_thread, policy):
    """Random arrivals (seeded), n samples, preemption by the global pool: with the local pool at its default
    bound, no admission, chunk or decode ever waits on the local pool."""
    rng = random.Random(2)
    vocab = gemma_tokenizer.vocab_size
    engine = Engine(tiny_gemma3, gemma_tokenizer, max_num_seqs=4, block_size=2, **{**policy, "n_blocks": 60})
    local = engine.pools.window.allocator
    assert local.n_blocks < 60
    count_local_refusals(engine)
    schedule, peaks = engine.scheduler.schedule, []

    def schedule_and_count():
        batch = schedule()
        peaks.append(local.n_used)  # held while the step runs, before its window blocks are released
        return batch

    engine.scheduler.schedule = schedule_and_count
    added = 0
    while added < 40 or engine.has_unfinished():
        while added < 40 and rng.random() < 0.5:
            prompt = [rng.randrange(10, vocab) for _ in range(rng.randint(5, 30))]
            engine.add_request(prompt, max_new_tokens=rng.randint(1, 30), n=rng.choice([1, 1, 2]))
            added += 1
        engine.step()
        engine.scheduler.check()
    assert engine.local_refusals == 0 and engine.scheduler.n_preemptions > 0
    assert local.n_blocks // 2 < max(peaks) <= local.n_blocks  # held while a step runs
    if policy.get("chunked_prefill"):
        assert max(peaks) == local.n_blocks  # the bound is reached: one block fewer would be short


def test_the_local_pool_of_gemma3_270m_is_smaller():
    """Gemma-3-270M on the meta device, 8 seats, blocks of 16, chunked prefill's default budget (256): the
    local pool's default bound is 286 blocks where it was 512, 140.6 MB where it was 251.7 MB (float32)."""
    config = SchedulerConfig(8, 256, 32768, chunked_prefill=True)
    with torch.device("meta"):
        model = Gemma3(Gemma3Config())
        n_window = window_pool_size(model, None, config, 16, 512)
        pools = LayerPools.for_model(model, n_blocks=512, block_size=16, n_window_blocks=n_window)
    assert n_window == 8 * 33 + 8 + (256 - 8 * 3) // 16 == 286  # windows, first boundaries, the rest
    assert pools.describe() == (
        "global layers: 3 layers x 512 blocks of 16 tokens, 50,331,648 bytes; "
        "sliding-window layers: 15 layers x 286 blocks of 16 tokens, 140,574,720 bytes"
    )
    assert pools.window.nbytes() < 251_658_240 and pools.nbytes() == 50_331_648 + 140_574_720


def test_a_window_pool_is_refused_without_window_layers_and_when_too_small(tiny_gemma3, gemma_tokenizer):
    with pytest.raises(ValueError, match="n_window_blocks"):
        Engine(tiny_gemma3, gemma_tokenizer, n_window_blocks=0)
    llama = Llama(LlamaConfig.tiny()).eval()
    with pytest.raises(ValueError, match="Llama has none"):
        Engine(llama, labkit.load_tokenizer("smollm2-135m"), n_window_blocks=4)
    engine = Engine(tiny_gemma3, gemma_tokenizer, max_num_seqs=2, block_size=2, n_window_blocks=3)
    with pytest.raises(ValueError, match="sliding-window layers' pool"):
        engine.add_request(LONG[0], max_new_tokens=4)
