"""The generation loop: parity with transformers `generate`, stop rules, sampling, streaming text."""

import pytest
import torch

import labkit

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
]
NEW_TOKENS = 24


def hf_greedy(model, prompt_ids, new_tokens):
    input_ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        out = model.generate(
            input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=new_tokens, do_sample=False
        )
    return out[0, len(prompt_ids) :].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("impl", ["labkit", "transformers"])
def test_greedy_matches_transformers_generate(smollm2, smollm2_labkit, prompt, impl):
    hf, tokenizer = smollm2
    model = smollm2_labkit if impl == "labkit" else hf
    prompt_ids = tokenizer(prompt)["input_ids"]
    expected = hf_greedy(hf, prompt_ids, NEW_TOKENS)
    assert labkit.generate_ids(model, tokenizer, prompt_ids, max_new_tokens=NEW_TOKENS) == expected


@pytest.mark.slow
def test_chat_greedy_matches_transformers_and_ends_at_eos(smollm2, smollm2_labkit):
    hf, tokenizer = smollm2
    prompt_ids = labkit.chat_prompt(tokenizer, "What is the capital of France?")
    steps = list(labkit.generate(smollm2_labkit, tokenizer, prompt_ids, max_new_tokens=40))
    assert [s.token_id for s in steps] == hf_greedy(hf, prompt_ids, 40)
    assert steps[-1].finish_reason == "eos" and steps[-1].token_id == tokenizer.eos_token_id
    assert "".join(s.text for s in steps) == "The capital of France is Paris."


def test_tiny_greedy_matches_transformers_generate(tokenizer):
    hf, ours = labkit.tiny_model("transformers", seed=5), labkit.tiny_model("labkit", seed=5)
    prompt_ids = tokenizer("Hello there")["input_ids"]
    expected = hf_greedy(hf, prompt_ids, 16)
    assert labkit.generate_ids(ours, tokenizer, prompt_ids, max_new_tokens=16) == expected


@pytest.mark.slow
def test_gemma_base_model_through_the_same_loop(gemma3):
    model, tokenizer = gemma3
    prompt_ids = tokenizer("The capital of France is")["input_ids"]
    assert labkit.generate_ids(model, tokenizer, prompt_ids, max_new_tokens=8) == hf_greedy(
        model, prompt_ids, 8
    )


def test_max_new_tokens_ends_with_length(tokenizer):
    steps = list(labkit.generate(labkit.tiny_model("labkit"), tokenizer, "Hi", max_new_tokens=5))
    assert len(steps) == 5
    assert [s.finish_reason for s in steps] == [None] * 4 + ["length"]
    assert steps[0].logits is None and steps[0].logprob <= 0  # logits are opt-in


def test_logits_on_steps_are_opt_in_and_give_the_logprob(tokenizer):
    model = labkit.tiny_model("labkit")
    steps = list(labkit.generate(model, tokenizer, "Hi", max_new_tokens=3, return_logits=True))
    assert steps[0].logits.shape == (49152,)
    for step in steps:
        assert abs(step.logprob - float(torch.log_softmax(step.logits, dim=-1)[step.token_id])) < 1e-6


def test_zero_new_tokens_yields_nothing(tokenizer):
    assert list(labkit.generate(labkit.tiny_model("labkit"), tokenizer, "Hi", max_new_tokens=0)) == []


@pytest.mark.slow
def test_stop_string_ends_generation_and_is_not_emitted(smollm2):
    model, tokenizer = smollm2
    prompt = labkit.chat_prompt(tokenizer, "What is the capital of France?")
    steps = list(labkit.generate(model, tokenizer, prompt, max_new_tokens=40, stop=["Paris"]))
    assert "".join(s.text for s in steps) == "The capital of France is "
    assert steps[-1].finish_reason == "stop"


def test_seeded_sampling_is_reproducible_and_seeds_differ(tokenizer):
    model = labkit.tiny_model("labkit")

    def sampled(seed):
        return labkit.generate_ids(model, tokenizer, "Hi", max_new_tokens=20, temperature=1.0, seed=seed)

    assert sampled(7) == sampled(7)
    assert sampled(7) != sampled(8)
    generator = torch.Generator().manual_seed(7)
    assert labkit.generate_ids(
        model, tokenizer, "Hi", max_new_tokens=20, temperature=1.0, generator=generator
    ) == sampled(7)


def test_low_temperature_sampling_becomes_greedy(tokenizer):
    model = labkit.tiny_model("labkit")
    greedy = labkit.generate_ids(model, tokenizer, "Hi", max_new_tokens=10)
    assert labkit.generate_ids(model, tokenizer, "Hi", max_new_tokens=10, temperature=1e-4, seed=0) == greedy


@pytest.mark.parametrize(
    "options, message",
    [
        ({"max_new_tokens": -1}, "max_new_tokens must be an integer >= 0"),
        ({"max_new_tokens": 2.5}, "max_new_tokens must be an integer >= 0"),
        ({"temperature": -0.5}, r"temperature must be >= 0 \(0 means greedy\)"),
        ({"stop": [""]}, "stop must be a list of non-empty strings"),
        ({"stop": "END"}, "stop must be a list of non-empty strings"),
        ({"max_new_tokens": 600}, "the model's context holds 512"),
    ],
)
def test_bad_arguments_are_clear_errors_at_call_time(tokenizer, options, message):
    with pytest.raises(ValueError, match=message):
        labkit.generate(labkit.tiny_model("labkit"), tokenizer, "Hi", **options)  # not iterated


def test_prompt_longer_than_context_says_what_to_change(tokenizer):
    with pytest.raises(ValueError, match="The prompt alone has 513 tokens; the model's context holds 512"):
        labkit.generate(labkit.tiny_model("labkit"), tokenizer, [1] * 513, max_new_tokens=1)
    with pytest.raises(ValueError, match="ask for at most 12 new tokens"):
        labkit.generate(labkit.tiny_model("labkit"), tokenizer, [1] * 500, max_new_tokens=20)


def test_empty_prompt_is_a_clear_error(tokenizer):
    with pytest.raises(ValueError, match="The prompt is empty"):
        labkit.generate(labkit.tiny_model("labkit"), tokenizer, [], max_new_tokens=1)


def test_base_model_has_no_chat_template(gemma3_tokenizer):
    with pytest.raises(ValueError, match="no chat template: it belongs to a base model"):
        labkit.chat_prompt(gemma3_tokenizer, "Hello")


@pytest.fixture(scope="module")
def gemma3_tokenizer():
    return labkit.load_tokenizer("gemma3-270m")


def test_chat_prompt_uses_the_tokenizers_own_template(tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    text = tokenizer.decode(labkit.chat_prompt(tokenizer, messages))
    assert (
        text
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["labkit", "transformers"])
def test_decoding_without_cache_gives_the_same_tokens_and_logits(smollm2, smollm2_labkit, impl):
    model = smollm2_labkit if impl == "labkit" else smollm2[0]
    tokenizer = smollm2[1]
    cached = list(labkit.generate(model, tokenizer, PROMPTS[2], max_new_tokens=16, return_logits=True))
    recomputed = list(
        labkit.generate(model, tokenizer, PROMPTS[2], max_new_tokens=16, use_cache=False, return_logits=True)
    )
    assert [s.token_id for s in cached] == [s.token_id for s in recomputed]
    assert max((a.logits - b.logits).abs().max().item() for a, b in zip(cached, recomputed)) < 1e-3
