"""The engine's compiled decode step (labkit.serving.compiled_step): the batch padded to a compiled size,
the context length dynamic, the cache read in the graph and written after it. With it, the engine still
gives each prompt what `labkit.generate` gives alone (greedy tokens and logits, seeded samples, n samples
from one prefill, preemption), every decode step runs compiled, and nothing else changes. Tiny model
(2 layers): a compile takes seconds, not the real model's tens of seconds."""

import subprocess
import sys

import pytest
import torch

import labkit
from labkit.core.paged import BlockPool
from labkit.serving.compiled_step import CompiledDecode, batch_sizes, padded_size, worth_padding
from labkit.serving.engine import Engine
from labkit.serving.runner import forward_packed, forward_padded

from .conftest import run_staggered

TINY_ATOL = 1e-4  # as tests/serving/test_engine.py: batched vs alone on tiny(), float32
PROMPTS = [
    "Hi",
    "The sea is",
    "Once upon a time, in a land far away,",
    "A",
    "The capital of France is",
    "Question: what is two plus two? Answer:",
]
NEW_TOKENS = [5, 9, 3, 12, 7, 10]
ARRIVALS = [0, 0, 1, 2, 2, 5]


def test_batches_are_padded_to_the_next_compiled_size():
    assert batch_sizes(16) == (1, 2, 4, 8, 16) and batch_sizes(6) == (1, 2, 4, 6) and batch_sizes(1) == (1,)
    assert [padded_size(b, (1, 2, 4, 6)) for b in (1, 2, 3, 5, 6, 7)] == [1, 2, 4, 6, 6, None]
    with pytest.raises(ValueError, match="max_batch"):
        batch_sizes(0)


def test_a_bad_switch_or_a_prompt_row_is_refused(tiny, tokenizer):
    with pytest.raises(TypeError, match="compile_decode must be True or False"):
        Engine(tiny, tokenizer, compile_decode="yes")
    step = CompiledDecode(tiny, BlockPool.for_model(tiny, n_blocks=4), max_batch=2)
    with pytest.raises(ValueError, match="exactly one new token per row"):
        step.run([[1, 2]], [[0]], [0])
    with pytest.raises(ValueError, match="exceed the largest compiled batch size, 2"):
        step.run([[1], [2], [3]], [[0], [1], [2]], [1, 1, 1])


@pytest.mark.slow  # compiles: about 10 s per batch size on 2 cores
def test_one_step_equals_the_eager_step_and_writes_the_same_keys(tiny, one_thread):
    pool = BlockPool.for_model(tiny, n_blocks=12, block_size=4)
    pool.keys.normal_(), pool.values.normal_()
    step = CompiledDecode(tiny, pool, max_batch=4)
    # 3 rows, padded to 4
    tables, starts, rows = [[0, 1, 2], [3, 4], [5, 6, 7]], [9, 5, 11], [[17], [4], [250]]
    before = pool.keys.clone(), pool.values.clone()
    compiled = step.run(rows, tables, starts)
    written = pool.keys.clone(), pool.values.clone()
    pool.keys.copy_(before[0]), pool.values.copy_(before[1])
    eager = forward_padded(tiny, pool, rows, tables, starts)
    assert compiled.shape == eager.shape == (3, tiny.config.vocab_size)
    assert (compiled - eager).abs().max() < TINY_ATOL
    assert torch.allclose(written[0], pool.keys, atol=1e-5) and torch.allclose(
        written[1], pool.values, atol=1e-5
    )
    assert not torch.equal(written[0], before[0])  # the new keys were written, each in its row's slot


@pytest.mark.slow  # compiles two graphs for 1, 2 and 4 rows
def test_a_drafted_step_equals_the_eager_packed_step_and_writes_only_the_fed_tokens(tiny, one_thread):
    pool = BlockPool.for_model(tiny, n_blocks=12, block_size=4)
    pool.keys.normal_(), pool.values.normal_()
    step = CompiledDecode(tiny, pool, max_batch=4, verify_width=4)
    # 3 rows padded to 4, each to 4 tokens: a pending token with 2, 0 and 3 drafts
    tables, starts, rows = [[0, 1, 2], [3, 4], [5, 6, 7]], [7, 5, 8], [[17, 3, 9], [4], [250, 1, 2, 3]]
    assert step.verifies(rows) and not step.verifies([[1, 2, 3, 4, 5]])  # wider than verify_width
    before = pool.keys.clone(), pool.values.clone()
    compiled = step.run_drafted(rows, tables, starts)
    written = pool.keys.clone(), pool.values.clone()
    pool.keys.copy_(before[0]), pool.values.copy_(before[1])
    eager = forward_packed(tiny, pool, rows, tables, starts, n_logits=[len(row) for row in rows])
    assert compiled.shape == eager.shape == (8, tiny.config.vocab_size)
    assert (compiled - eager).abs().max() < TINY_ATOL
    # the same slots written with the same keys: a padding token's key is written nowhere
    assert torch.allclose(written[0], pool.keys, atol=1e-5) and torch.allclose(
        written[1], pool.values, atol=1e-5
    )
    assert step.verify_steps == 1
    with pytest.raises(ValueError, match="1 to 4 tokens per row"):
        step.run_drafted([[1, 2, 3, 4, 5]], [[0, 1]], [0])


def test_a_drafted_step_runs_compiled_only_where_padding_costs_little():
    assert worth_padding(5, 2) and worth_padding(40, 40)  # one row; 8 rows that all draft 4
    assert not worth_padding(40, 12)  # 8 rows, one drafting: 28 padding tokens


@pytest.mark.slow
def test_a_compiled_engine_gives_each_prompt_what_it_gets_alone(tiny, tokenizer, one_thread):
    engine = Engine(tiny, tokenizer, max_num_seqs=4, record_logits=True, compile_decode=True)
    assert sorted(engine.compile_seconds) == [1, 2, 4]  # every size compiled at start-up
    ids = run_staggered(engine, [(p, {"max_new_tokens": n}) for p, n in zip(PROMPTS, NEW_TOKENS)], ARRIVALS)
    decodes = sum(m.kind == "decode" for m in engine.step_metrics)
    # every decode step ran compiled (and 1-token prompts)
    assert engine.runner.compiled.steps >= decodes > 10
    for request_id, prompt, n in zip(ids, PROMPTS, NEW_TOKENS):
        steps = list(labkit.generate(tiny, tokenizer, prompt, max_new_tokens=n, return_logits=True))
        seq = engine.requests[request_id]
        assert seq.output_ids == [s.token_id for s in steps], prompt
        assert (torch.stack(seq.logits) - torch.stack([s.logits for s in steps])).abs().max() < TINY_ATOL
    sampled = {"temperature": 1.0, "top_k": 20, "seed": 5, "max_new_tokens": 8}
    group = engine.add_request("The sea is", n=3, **sampled)  # n samples: shared blocks, copy on write
    engine.run_until_done()
    for i, sample in enumerate(engine.samples(group)):
        alone = labkit.generate_ids(tiny, tokenizer, "The sea is", **{**sampled, "seed": 5 + i})
        assert engine.requests[sample].output_ids == alone
    engine.block_manager.check()
    assert engine.pool.allocator.n_used == 0


@pytest.mark.slow
def test_preempted_requests_come_back_the_same_on_the_compiled_step(tiny, tokenizer, one_thread):
    engine = Engine(tiny, tokenizer, max_num_seqs=4, n_blocks=10, block_size=4, compile_decode=True)
    requests = [engine.add_request(p, max_new_tokens=20 - i) for i, p in enumerate(PROMPTS[:4])]
    engine.run_until_done()
    assert engine.scheduler.n_preemptions > 0 and engine.runner.compiled.steps > 0
    for i, (request_id, prompt) in enumerate(zip(requests, PROMPTS)):
        assert engine.requests[request_id].output_ids == labkit.generate_ids(
            tiny, tokenizer, prompt, max_new_tokens=20 - i
        )


FRESH_PROCESS = """
import labkit
from labkit.serving.engine import Engine
tiny, tokenizer = labkit.tiny_model("labkit", seed=0), labkit.load_tokenizer("smollm2-135m")
engine = Engine(tiny, tokenizer, max_num_seqs=1, compile_decode=True)
request = engine.add_request("The sea is", max_new_tokens=3)
engine.run_until_done()
print(engine.requests[request].output_ids == labkit.generate_ids(tiny, tokenizer, "The sea is", max_new_tokens=3))
"""


@pytest.mark.slow
def test_a_float32_engine_compiles_its_step_in_a_fresh_process():
    """The graph's attention asks for labkit's kernel; a process whose first use of it is inside the graph
    (a float32 server: nothing loaded the kernel before) must still compile, as `labkit serve --compile` does."""
    done = subprocess.run([sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "True"
