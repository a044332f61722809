"""The serving engine checks its arguments when called: each bad one raises a labkit error that names it,
before any model work (tiny model, SmolLM2's tokenizer without its weights). The static decoder's
checks are in tests/fast/test_static.py."""

import pytest
import torch

from labkit.core.paged import BlockAllocator, BlockPool
from labkit.serving.batch_cache import BatchKV
from labkit.serving.block_manager import BlockManager
from labkit.serving.engine import Engine
from labkit.serving.named_blocks import NULL_BLOCK


@pytest.mark.parametrize(
    "options, named",
    [
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"max_num_seqs": 2.0}, "max_num_seqs"),
        ({"block_size": True}, "block_size"),
        ({"n_blocks": 0}, "n_blocks"),
        ({"n_blocks": 4.5}, "n_blocks"),
        # was replaced by the default without a word
        ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
        ({"step_history": -1}, "step_history"),
        ({"step_history": "10"}, "step_history"),
    ],
)
def test_engine_options_are_checked_and_named(tiny, tokenizer, options, named):
    with pytest.raises(ValueError, match=named):
        Engine(tiny, tokenizer, **options)


def test_engine_refuses_a_missing_tokenizer_and_a_model_that_is_not_labkits(tiny, tokenizer):
    with pytest.raises(TypeError, match="tokenizer must be the model's tokenizer"):
        Engine(tiny, None)
    with pytest.raises(TypeError, match="labkit's Llama"):
        Engine(torch.nn.Linear(2, 2), tokenizer)


def test_generate_batch_takes_a_list_of_prompts_not_one_string(tiny, tokenizer):
    engine = Engine(tiny, tokenizer)
    with pytest.raises(
        ValueError, match=r"prompts must be a list of prompts .*wrap one prompt as \[prompt\]"
    ):
        engine.generate_batch("Hello there", max_new_tokens=2)  # was: one prompt per character
    assert not engine.has_unfinished() and engine.requests == {}
    assert len(engine.generate_batch(["Hello", "The sea"], max_new_tokens=2)) == 2


def test_unknown_request_ids_are_named(tiny, tokenizer):
    engine = Engine(tiny, tokenizer)
    with pytest.raises(KeyError, match="No request with id 7"):
        engine.abort(7)
    with pytest.raises(KeyError, match=r"\(7: no such request\)"):
        engine.release(7)


def test_a_block_manager_takes_a_window_pool_and_its_window_together():
    with pytest.raises(ValueError, match="window_allocator and sliding_window together"):
        BlockManager(BlockAllocator(4), 4, sliding_window=4)
    with pytest.raises(ValueError, match="sliding_window"):
        BlockManager(BlockAllocator(4), 4, BlockAllocator(4), sliding_window=0)


def test_a_pass_may_not_write_into_a_released_window_block(tiny):
    pool = BlockPool.for_model(tiny, n_blocks=4, block_size=2)
    with pytest.raises(ValueError, match=r"released a block this pass writes \(from position 2\)"):
        BatchKV(pool, [[NULL_BLOCK, NULL_BLOCK]], starts=[2], n_new=[1])
