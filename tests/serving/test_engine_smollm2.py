"""Batch invariance of the serving engine on the real model (SmolLM2-135M-Instruct, float32, labkit's Llama):
chat prompts of different lengths, added at different steps, give the greedy tokens and the logits of
`labkit.generate` on each prompt alone; so do prompts sharing a system prompt through the prefix cache."""

import pytest

import labkit
from labkit.serving.engine import Engine

from .conftest import compare, run_staggered

QUESTIONS = [
    "Hi!",
    "What is the capital of France?",
    "Name three primary colors.",
    "Write a haiku about the autumn moon over a quiet mountain lake.",
    "Explain in simple words what a neural network is and what it is used for.",
    "List some healthy snacks that are easy to take to work or school, with one sentence about each.",
    "I am planning a three-day trip to Rome in October with my parents, who do not like long walks. "
    "Which sights should we see, and how should we split them across the days?",
    "Summarize in one sentence: The old lighthouse stood at the edge of the cliff for two hundred years. "
    "Every night its keeper climbed the stairs, trimmed the wick and watched the beam sweep the water.",
]
NEW_TOKENS = [6, 12, 20, 9, 24, 15, 18, 10]
ARRIVAL_STEPS = [0, 0, 0, 1, 2, 4, 7, 11]  # request i is added before engine step ARRIVAL_STEPS[i]

SYSTEM = (
    "You are a patient teacher for curious children. Answer in at most two short sentences, with simple "
    "words, no lists and no jargon. If a question is unclear, say what you understood and answer that."
)
SHARED = ["Why is the sea salty?", "How do birds fly?", "What is a rainbow made of?", "Why do cats purr?"]


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True], ids=["prefill-first", "chunked-prefill"])
def test_batched_chat_equals_each_prompt_alone(smollm2_labkit, tokenizer, chunked):
    prompts = [labkit.chat_prompt(tokenizer, q) for q in QUESTIONS]
    assert len({len(p) for p in prompts}) == len(prompts)  # all lengths differ
    chunking = {"chunked_prefill": True, "max_num_batched_tokens": 48, "prefill_chunk": 32} if chunked else {}
    engine = Engine(smollm2_labkit, tokenizer, max_num_seqs=8, record_logits=True, **chunking)
    ids = run_staggered(
        engine, [(p, {"max_new_tokens": n}) for p, n in zip(prompts, NEW_TOKENS)], ARRIVAL_STEPS
    )
    assert max(m.batch_size for m in engine.step_metrics) >= 6  # they really shared forward passes
    assert {m.kind for m in engine.step_metrics} == (
        {"prefill", "decode", "mixed"} if chunked else {"prefill", "decode"}
    )
    found = [compare(engine, i, smollm2_labkit, tokenizer, p, n) for i, p, n in zip(ids, prompts, NEW_TOKENS)]
    compared, total = sum(f[0] for f in found), sum(f[1] for f in found)
    assert compared >= 0.9 * total, f"only {compared} of {total} tokens before a near-tie: pick other prompts"
    assert len({tuple(engine.requests[i].output_ids) for i in ids}) == len(ids)
    print(
        f"max |batched - alone| logit difference: {max(f[2] for f in found):.2e}; "
        f"{compared}/{total} tokens compared"
    )


@pytest.mark.slow
def test_shared_system_prompt_hits_the_prefix_cache_and_changes_nothing(smollm2_labkit, tokenizer):
    prompts = [
        labkit.chat_prompt(tokenizer, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}])
        for q in SHARED
    ]
    engine = Engine(smollm2_labkit, tokenizer, max_num_seqs=4, record_logits=True)
    ids = [engine.add_request(p, max_new_tokens=12) for p in prompts]
    engine.step()  # the four prompts admitted and prefilled together, the shared blocks computed once
    block = engine.block_manager.block_size
    # the three later prompts reuse the first one's system-prompt blocks
    assert engine.block_manager.hit_rate > 0
    assert engine.pool.allocator.n_used < sum(-(-len(p) // block) for p in prompts)
    engine.run_until_done()
    found = [compare(engine, i, smollm2_labkit, tokenizer, p, 12) for i, p in zip(ids, prompts)]
    assert sum(f[0] for f in found) >= 0.9 * sum(f[1] for f in found)
    engine.block_manager.check()
    assert engine.pool.allocator.n_used == 0
    # after every request ended: the prefix is still cached
    again = engine.add_request(prompts[0], max_new_tokens=12)
    engine.step()
    assert engine.step_metrics[-1].n_tokens < len(prompts[0]) - len(SYSTEM) // 8
    engine.run_until_done()
    assert engine.requests[again].output_ids == engine.requests[ids[0]].output_ids
