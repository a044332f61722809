"""n samples from one prefill against n separate requests (notebook 14, section 2): the same answers, one
prompt computed instead of n, fewer KV blocks; the separate requests' prefix cache is really off."""

import pytest

from labkit.serving.engine import Engine
from labkit.serving.sharing import NoPrefixCache, sharing_costs, without_prefix_cache

PROMPT = "The sea is blue and the sky is grey, and the long road runs on to the hills where"  # > 1 block


def test_one_prefill_gives_the_same_answers_for_less(tiny, tokenizer, one_thread):
    shared, separate = sharing_costs(
        tiny, tokenizer, PROMPT, n=4, temperature=1.0, top_k=20, max_new_tokens=6
    )
    prompt_tokens = len(tokenizer(PROMPT)["input_ids"])
    assert shared.texts == separate.texts and len(set(shared.texts)) > 1  # same seeds, different samples
    assert (
        shared.prompt_tokens_computed == prompt_tokens
        and separate.prompt_tokens_computed == 4 * prompt_tokens
    )
    assert shared.peak_blocks < separate.peak_blocks
    assert shared.generated_tokens == separate.generated_tokens == 4 * 6
    assert "one prefill" in shared.describe() and "no prefix cache" in separate.describe()


def test_without_prefix_cache_recomputes_a_prompt_another_request_computed(tiny, tokenizer, one_thread):
    cached = Engine(tiny, tokenizer, max_num_seqs=2)
    plain = without_prefix_cache(Engine(tiny, tokenizer, max_num_seqs=2))
    assert (
        isinstance(plain.block_manager, NoPrefixCache)
        and plain.scheduler.block_manager is plain.block_manager
    )
    for engine in (cached, plain):
        for _ in range(2):
            engine.add_request(PROMPT, max_new_tokens=1)
        engine.run_until_done()
    assert cached.block_manager.hits > 0 and plain.block_manager.hits == 0
    with pytest.raises(ValueError, match="before the engine's first request"):
        without_prefix_cache(cached)
