"""labkit.fast.static: the static-cache decoder computes what labkit's ordinary loop computes, eager and
compiled, and prompt-lookup speculation on it keeps the greedy output.

Token comparisons go through `agrees_with_reference`: a chosen token must be the reference's argmax,
or within NEAR_TIE of it (two float32 summation orders may swap a near-tie; never test on one).
"""

import pytest
import torch

import labkit
from labkit.core.forward import all_logits
from labkit.fast import optimize
from labkit.fast.static import StaticDecoder, inductor_cache, slots_for

NEAR_TIE = 1e-3  # logits closer than this may swap places between summation orders


def agrees_with_reference(model, prompt_ids: list[int], new_ids: list[int]) -> None:
    """Each new id is the ordinary (uncached, full-sequence) forward pass's greedy choice, up to near-ties."""
    # [new, V]: the step choosing each id
    logits = all_logits(model, prompt_ids + new_ids)[len(prompt_ids) - 1 : -1]
    for step, (row, chosen) in enumerate(zip(logits, new_ids)):
        assert row.max() - row[chosen] <= NEAR_TIE, (
            f"step {step}: chose {chosen}, reference {int(row.argmax())}"
        )


def assert_steps_agree(eager: StaticDecoder, compiled: StaticDecoder, token_id: int) -> None:
    """After the same prompt, one decode step of `compiled` gives the logits of `eager`'s."""
    token, position = torch.tensor([[token_id]]), torch.tensor([3])
    with torch.no_grad():
        eager.prefill([5, 17, 300])
        compiled.prefill([5, 17, 300])
        _, expected = eager.decode(token, position)
        _, got = compiled.step(token, position)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_slots_round_up_to_a_multiple_of_64_within_the_context():
    assert slots_for(137, 8192) == 192 and slots_for(64, 8192) == 64 and slots_for(500, 300) == 300


def test_static_logits_equal_the_ordinary_forward_pass(tiny):
    decoder = StaticDecoder(tiny, max_length=64)
    ids = [5, 17, 300, 42, 9, 1000]
    with torch.no_grad():
        prefill = decoder.run(torch.tensor([ids[:4]]), torch.arange(4), every_position=True)  # [4, V]
        step = decoder.run(torch.tensor([[ids[4]]]), torch.tensor([4]))  # [1, V]
        two = decoder.run(torch.tensor([ids[5:]]), torch.tensor([5]))
    reference = all_logits(tiny, ids)  # [6, V]
    torch.testing.assert_close(prefill, reference[:4], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(step[0], reference[4], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(two[0], reference[5], atol=1e-4, rtol=1e-4)


def test_static_greedy_follows_the_reference_and_is_repeatable(tiny):
    decoder = StaticDecoder(tiny, max_length=64)
    first = decoder.generate([5, 17, 300], max_new_tokens=20)
    assert len(first) == 20
    agrees_with_reference(tiny, [5, 17, 300], first)
    assert decoder.generate([5, 17, 300], max_new_tokens=20) == first  # the old slots are simply overwritten


@pytest.mark.slow
def test_static_greedy_equals_labkits_loop_on_the_real_model():
    hf_model, tokenizer = labkit.load_model("smollm2-135m")
    model = optimize(labkit.Llama.from_hf(hf_model), ("fuse",))
    prompt = tokenizer("The history of the Roman Empire begins with")["input_ids"]
    new_ids = StaticDecoder(model, max_length=64).generate(prompt, max_new_tokens=24)
    agrees_with_reference(model, prompt, new_ids)
    assert len(new_ids) == 24


def test_stops_at_eos_and_includes_it(tiny):
    decoder = StaticDecoder(tiny, max_length=64)
    free = decoder.generate([5, 17, 300], max_new_tokens=10)
    eos = free[3]
    stopped = decoder.generate([5, 17, 300], max_new_tokens=10, eos_id=eos)
    assert stopped == free[: free.index(eos) + 1]
    looked, _ = decoder.generate_with_lookup([5, 17, 300], max_new_tokens=10, eos_id=eos)
    assert looked == stopped


@pytest.mark.slow
def test_prompt_lookup_keeps_the_greedy_output_in_fewer_calls():
    hf_model, tokenizer = labkit.load_model("smollm2-135m")
    model = labkit.Llama.from_hf(hf_model)
    text = "Copy the list. List: red, green, blue, yellow, purple, orange, black, white. Copy: red, green,"
    prompt = tokenizer(text)["input_ids"]
    decoder = StaticDecoder(model, max_length=slots_for(len(prompt) + 24, 8192))
    plain = decoder.generate(prompt, max_new_tokens=24)
    looked, calls = decoder.generate_with_lookup(prompt, max_new_tokens=24, gamma=4)
    agrees_with_reference(model, prompt, looked)
    assert len(looked) == 24
    # some guesses from the prompt were accepted (the first token comes from the prefill)
    assert calls < 24 - 1
    agrees_with_reference(model, prompt, plain)  # both follow the reference (equal, up to near-ties)


@pytest.mark.slow
def test_compiled_step_computes_what_the_eager_step_computes(tiny):
    eager = StaticDecoder(tiny, max_length=64)
    compiled = StaticDecoder(tiny, max_length=64, compile=True)
    assert compiled.compiled and inductor_cache().name
    new_ids = compiled.generate([5, 17, 300], max_new_tokens=12)
    agrees_with_reference(tiny, [5, 17, 300], new_ids)
    assert compiled.compile_seconds["decode"] > 0
    assert_steps_agree(eager, compiled, new_ids[0])
    looked, _ = compiled.generate_with_lookup([5, 17, 300], max_new_tokens=12, gamma=2)
    agrees_with_reference(tiny, [5, 17, 300], looked)
    assert set(compiled.compile_seconds) == {"decode", "verify"}


@pytest.mark.slow
def test_each_compiled_decoder_runs_its_own_model():
    """The compiled step skips dynamo's guards on the model's modules, so two decoders over different
    models (different layer classes, different weights) must not share a compiled graph."""
    torch.manual_seed(1)
    plain = labkit.tiny_model(impl="labkit")
    fused = optimize(labkit.tiny_model(impl="labkit"), ("fuse", "int8"))
    for model in (plain, fused, plain):
        assert_steps_agree(
            StaticDecoder(model, max_length=64), StaticDecoder(model, max_length=64, compile=True), 17
        )


def test_bad_requests_say_what_is_allowed(tiny):
    with pytest.raises(ValueError, match="labkit's Llama"):
        StaticDecoder(torch.nn.Linear(2, 2), max_length=8)
    context_rule = r"max_length must be a whole number from 2 to 512 \(the model's context\), got "
    for max_length in (100_000, 1, 16.0, True):
        with pytest.raises(ValueError, match=context_rule):
            StaticDecoder(tiny, max_length=max_length)
    decoder = StaticDecoder(tiny, max_length=16)
    with pytest.raises(ValueError, match="max_length >= 20"):
        decoder.generate(list(range(10)), max_new_tokens=10)
    with pytest.raises(ValueError, match="at least one"):
        decoder.generate([], max_new_tokens=4)
    for gamma in (0, 2.0, True):
        with pytest.raises(
            ValueError, match=r"gamma must be a whole number of 1 or more \(guesses per verify call\)"
        ):
            decoder.generate_with_lookup([1, 2], max_new_tokens=4, gamma=gamma)


# --- bad input: refused before any model work ---------------------------------------------------------


@pytest.mark.parametrize(
    "prompt_ids, max_new_tokens, message",
    [
        ("Hello there", 4, "prompt_ids must be a list of token ids"),  # text where ids are expected
        ([1, 2, 1.5], 4, "prompt_ids must be a list of token ids"),
        ([1, 2, 10**9], 4, r"outside the vocabulary \[0, "),
        ([1, -3], 4, r"outside the vocabulary \[0, "),
        ([1, 2, 3], 2.5, "max_new_tokens must be a whole number of 1 or more, got 2.5"),
        ([1, 2, 3], 0, "max_new_tokens must be a whole number of 1 or more, got 0"),
        ([], 4, "at least one of each"),
        (list(range(1, 40)), 30, "must fit this decoder's 64 slots"),
    ],
)
def test_static_decoder_checks_a_request_before_running_it(tiny, prompt_ids, max_new_tokens, message):
    decoder = StaticDecoder(tiny, 64)
    for generate in (decoder.generate, decoder.generate_with_lookup):
        with pytest.raises(ValueError, match=message):
            generate(prompt_ids, max_new_tokens)
    assert len(decoder.generate([1, 2, 3], 2)) == 2  # and it still runs
