"""The engine on labkit's own kernels, the server's fastest weights (fused projections, Q4_1 weights x Q8_1
activations, the head Q8_0): staggered, chunked, preempted and aborted requests each get what `generate`
gives the same model alone, and no block leaks, on each SIMD path of the kernel this CPU runs (AVX2 forced,
and AVX-512 where the CPU has it). Tiny model (2 layers, random weights): the kernels, not the model, are
under test. One test runs the real SmolLM2 on them, where Q8_1's int8 rounding magnifies a last bit: a
request's log-probabilities are the same bits whoever shares its steps (batch-invariant attention)."""

import pytest

import labkit
from labkit.benchmarks.serve_servers import FASTEST
from labkit.fast.kernel import PATH_ENV_VAR, load_kernel
from labkit.fast.optimize import optimize
from labkit.serving.engine import Engine

from .conftest import run_staggered

PROMPTS = [
    "Hi",
    "The sea is",
    "Once upon a time, in a land far away,",
    "A",
    "Write a haiku about the autumn moon over the quiet mountain lake.",
    "The capital of France is",
]
NEW_TOKENS = [5, 9, 3, 12, 7, 10]
OPTIONS = [{}, {"repetition_penalty": 1.5}, {}, {"repetition_penalty": 1.5}, {}, {}]


@pytest.fixture(scope="module")
def tiny_fast():
    """tiny() with the server's fastest steps applied: every linear layer on labkit's kernels."""
    status = load_kernel()
    if not status.available:
        pytest.skip(
            f"labkit's kernel is unavailable here (tests/fast/test_kernel.py checks why): {status.reason}"
        )
    return optimize(labkit.tiny_model("labkit", seed=0), FASTEST)


@pytest.fixture(params=["avx2", "avx512"])
def simd_path(request, monkeypatch):
    """The kernel forced onto one SIMD path for the test; the default path again after it."""
    if request.param not in load_kernel().paths:
        pytest.skip(f"this CPU does not run the kernel's {request.param} path")
    monkeypatch.setenv(PATH_ENV_VAR, request.param)
    try:
        assert load_kernel(reload=True).path == request.param
        yield request.param
    finally:
        monkeypatch.undo()
        load_kernel(reload=True)


def assert_each_alone(engine, model, tokenizer, ids, requests):
    for request_id, (prompt, options) in zip(ids, requests):
        alone = labkit.generate_ids(model, tokenizer, prompt, **options)
        assert engine.requests[request_id].output_ids == alone, prompt


def assert_all_free(engine):
    engine.block_manager.check()
    assert engine.pool.allocator.n_used == 0


@pytest.mark.parametrize("chunked", [False, True], ids=["prefill-first", "chunked-prefill"])
def test_staggered_requests_on_the_kernels_get_what_each_gets_alone(
    tiny_fast, tokenizer, one_thread, simd_path, chunked
):
    requests = [(p, {"max_new_tokens": n, **o}) for p, n, o in zip(PROMPTS, NEW_TOKENS, OPTIONS)]
    engine = Engine(
        tiny_fast,
        tokenizer,
        max_num_seqs=4,
        chunked_prefill=chunked,
        max_num_batched_tokens=8 if chunked else None,
    )
    ids = run_staggered(engine, requests, arrivals=[0, 0, 1, 2, 2, 5])
    if chunked:
        # decode rows and a prompt's chunk in one step
        assert "mixed" in {m.kind for m in engine.step_metrics}
    assert_each_alone(engine, tiny_fast, tokenizer, ids, requests)
    assert_all_free(engine)


def test_preempted_and_aborted_requests_on_the_kernels_leak_nothing(
    tiny_fast, tokenizer, one_thread, simd_path
):
    requests = [(p, {"max_new_tokens": 20 - i, **OPTIONS[i]}) for i, p in enumerate(PROMPTS[:4])]
    engine = Engine(tiny_fast, tokenizer, max_num_seqs=4, n_blocks=10, block_size=4)
    ids = run_staggered(engine, requests, arrivals=[0, 0, 1, 1])
    assert engine.scheduler.n_preemptions > 0
    assert_each_alone(engine, tiny_fast, tokenizer, ids, requests)
    running = engine.add_request(PROMPTS[4], max_new_tokens=8)
    engine.step()
    engine.abort(running)
    assert_all_free(engine)


@pytest.mark.slow  # compiles the decode step for batch sizes 1 and 2: about 20 s on 2 cores
def test_the_compiled_step_on_the_kernels_gives_each_prompt_what_it_gets_alone(
    tiny_fast, tokenizer, one_thread
):
    engine = Engine(tiny_fast, tokenizer, max_num_seqs=2, compile_decode=True)
    requests = [(p, {"max_new_tokens": n, **o}) for p, n, o in zip(PROMPTS[:4], NEW_TOKENS, OPTIONS)]
    ids = run_staggered(engine, requests, arrivals=[0, 0, 1, 3])
    assert engine.runner.compiled.steps > 0
    assert_each_alone(engine, tiny_fast, tokenizer, ids, requests)
    assert_all_free(engine)


@pytest.fixture(scope="module")
def smollm2_fast(smollm2):
    """The real SmolLM2 with the server's fastest steps (a labkit copy: the session's model is not touched)."""
    if not load_kernel().available:
        pytest.skip(f"labkit's kernel is unavailable here: {load_kernel().reason}")
    return optimize(labkit.Llama.from_hf(smollm2[0]), FASTEST), smollm2[1]


def first_request_logprobs(model, tokenizer, other: str | None, joins_at_step: int) -> list[float]:
    """The log-probabilities of a greedy request's tokens in an engine where `other` joins it (or not)."""
    engine = Engine(model, tokenizer, max_num_seqs=4)
    ask = [{"role": "user", "content": "Why is the sky blue? Answer in one sentence."}]
    first = engine.add_request(
        tokenizer.apply_chat_template(ask, tokenize=False, add_generation_prompt=True),
        max_new_tokens=12,
        logprobs=0,
    )
    steps = 0
    while engine.has_unfinished():
        if other is not None and steps == joins_at_step:
            engine.add_request(other, max_new_tokens=8)
        engine.step()
        steps += 1
    return [entry.logprob for entry in engine.requests[first].logprobs]


@pytest.mark.slow  # the real model: about 10 s
def test_on_the_real_4bit_model_a_request_gets_the_same_bits_whoever_shares_its_steps(
    smollm2_fast, one_thread
):
    """Bit-equal log-probabilities, not only equal tokens: no near-tie can make this pass or fail. Q8_1 rounds
    every activation to int8, so attention whose last bits followed the batch's layout failed this."""
    model, tokenizer = smollm2_fast
    alone = first_request_logprobs(model, tokenizer, None, 0)
    other = "Tell me a long story about a dragon who guards a library."
    # prefilled packed, then padded decodes
    assert first_request_logprobs(model, tokenizer, other, 0) == alone
    assert first_request_logprobs(model, tokenizer, other, 1) == alone  # a decode beside a prompt's prefill
