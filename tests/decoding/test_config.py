"""DecodingConfig: clear errors for bad options, transformers' order of transforms, and `generate`
with the config agreeing with transformers' `generate(do_sample=True)` token for token."""

import pytest
import torch
from transformers import GenerationConfig

import labkit
from labkit.decoding.config import DecodingConfig, preset, presets
from labkit.decoding.transforms import apply_transforms

PROMPT = "Once upon a time, in a small village,"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"temperature": -0.1}, r"temperature must be >= 0 \(0 means greedy\), got -0.1"),
        ({"temperature": "hot"}, r"temperature must be a number >= 0"),
        ({"temperature": 1.0, "top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"temperature": 1.0, "top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"temperature": 1.0, "top_k": -1}, r"top_k must be an integer >= 0"),
        ({"temperature": 1.0, "top_k": 2.5}, r"top_k must be an integer >= 0"),
        ({"temperature": 1.0, "min_p": 1.5}, r"min_p must be in \[0, 1\]"),
        ({"temperature": 1.0, "min_p": -0.1}, r"min_p must be in \[0, 1\]"),
        ({"temperature": 1.0, "typical_p": 0.0}, r"typical_p must be in \(0, 1\]"),
        ({"temperature": 1.0, "epsilon_cutoff": 1.0}, r"epsilon_cutoff must be in \[0, 1\)"),
        ({"num_beams": 0}, r"num_beams must be an integer >= 1"),
        ({"num_beams": 2.0}, r"num_beams must be an integer >= 1"),
        ({"repetition_penalty": 0.0}, r"repetition_penalty must be > 0"),
        ({"repetition_penalty": -1.2}, r"repetition_penalty must be > 0"),
        ({"repetition_penalty": "1.2"}, r"repetition_penalty must be a number"),
        ({"presence_penalty": 3.0}, r"presence_penalty must be in \[-2, 2\]"),
        ({"frequency_penalty": -2.5}, r"frequency_penalty must be in \[-2, 2\]"),
        ({"frequency_penalty": True}, r"frequency_penalty must be a number"),
        ({"no_repeat_ngram_size": -2}, r"no_repeat_ngram_size must be an integer >= 0"),
        ({"logit_bias": {5: 200.0}}, r"logit_bias values must be numbers in \[-100, 100\]"),
        ({"logit_bias": {-1: 1.0}}, r"logit_bias keys must be token ids"),
        ({"banned_tokens": [-3]}, r"banned_tokens must be token ids"),
        ({"max_new_tokens": -1}, r"max_new_tokens must be an integer >= 0"),
        ({"stop": "END"}, r"stop must be a list of non-empty strings"),
        ({"early_stopping": "sometimes", "num_beams": 2}, r"early_stopping must be True, False or 'never'"),
        ({"num_beams": 4, "temperature": 0.7}, r"num_beams=4 is deterministic beam search.*temperature=0.7"),
        ({"num_beams": 4, "temperature": 1.0, "top_p": 0.9}, r"num_beams=4.*top_p=0.9"),
        ({"top_k": 50}, r"top_k=50 only acts when sampling, but temperature=0 means greedy"),
        ({"length_penalty": 2.0}, r"length_penalty=2.0 only acts in beam search; set num_beams > 1"),
        (
            {"num_beams": 2, "num_return_sequences": 3},
            r"num_return_sequences must be an integer in \[1, num_beams=2\]",
        ),
        ({"seed": "one"}, r"seed must be an integer from -2\*\*63 to 2\*\*63 - 1"),
    ],
)
def test_bad_options_name_the_parameter_and_its_range(options, message):
    with pytest.raises(ValueError, match=message):
        DecodingConfig(**options)


def test_generate_rejects_bad_options_when_called(tokenizer):
    model = labkit.tiny_model("labkit")
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        labkit.generate(model, tokenizer, "Hi", temperature=1.0, top_p=2.0)
    with pytest.raises(TypeError, match="unknown option.*top_q"):
        labkit.generate(model, tokenizer, "Hi", top_q=0.5)
    with pytest.raises(ValueError, match="either as config"):
        labkit.generate(model, tokenizer, "Hi", temperature=1.0, config=DecodingConfig())


def test_config_is_frozen_and_replace_validates():
    config = DecodingConfig(temperature=0.7, top_p=0.9)
    with pytest.raises(AttributeError):
        config.temperature = 1.0
    assert config.replace(top_p=0.5).top_p == 0.5 and config.top_p == 0.9
    with pytest.raises(ValueError, match="top_p"):
        config.replace(top_p=0)


def test_transforms_come_in_transformers_order():
    config = DecodingConfig(
        temperature=0.7,
        top_k=40,
        top_p=0.9,
        min_p=0.05,
        typical_p=0.95,
        epsilon_cutoff=1e-4,
        eta_cutoff=1e-3,
        repetition_penalty=1.2,
        presence_penalty=0.1,
        no_repeat_ngram_size=3,
        logit_bias={5: 1.0},
        banned_tokens=(7,),
        min_new_tokens=2,
    )
    names = [t.name for t in config.transforms(prompt_length=3, eos_token_ids={2})]
    assert names == [
        "logit_bias",
        "repetition_penalty",
        "presence_frequency_penalty",
        "no_repeat_ngram",
        "ban_tokens",
        "min_new_tokens_filter",
        "apply_temperature",
        "top_k_filter",
        "top_p_filter",
        "min_p_filter",
        "typical_filter",
        "epsilon_filter",
        "eta_filter",
    ]
    assert repr(config.transforms(3, {2})[1]) == "repetition_penalty(penalty=1.2)"
    assert [t.name for t in DecodingConfig().transforms()] == []  # greedy: nothing to do


PIPELINES = [
    DecodingConfig(temperature=0.7, top_k=40, top_p=0.9),
    DecodingConfig(temperature=1.3, min_p=0.1, repetition_penalty=1.3),
    DecodingConfig(temperature=0.9, typical_p=0.8, no_repeat_ngram_size=2, min_new_tokens=8),
    DecodingConfig(
        temperature=1.0, epsilon_cutoff=3e-4, eta_cutoff=1e-3, logit_bias={11: 3.0}, banned_tokens=(5,)
    ),
    DecodingConfig(repetition_penalty=0.8, no_repeat_ngram_size=3),  # greedy: penalties only
]


@pytest.mark.slow
@pytest.mark.parametrize("config", PIPELINES, ids=range(len(PIPELINES)))
def test_pipeline_equals_transformers_processor_list(config, smollm2):
    """The whole list, in order, against the one transformers builds from the same options."""
    model, tokenizer = smollm2
    prompt_ids = torch.tensor([tokenizer(PROMPT)["input_ids"] + [11, 5, 11]])
    prompt_length = prompt_ids.shape[1] - 3
    with torch.no_grad():
        logits = model(prompt_ids).logits[:, -1].float()
    generation_config = GenerationConfig(**config.hf_kwargs(), eos_token_id=2, pad_token_id=2)
    generation_config._eos_token_tensor = torch.tensor([2])
    processors = model._get_logits_processor(generation_config, input_ids_seq_length=prompt_length)
    expected = processors(prompt_ids, logits.clone())
    got = apply_transforms(logits, prompt_ids, config.transforms(prompt_length, {2}))
    assert torch.equal(got, expected)


def hf_sample(model, prompt_ids, seed, **kwargs):
    input_ids = torch.tensor([prompt_ids])
    torch.manual_seed(seed)  # transformers draws from the global generator; ours is seeded alike
    with torch.no_grad():
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
    return out[0, len(prompt_ids) :].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("config", PIPELINES[:3], ids=range(3))
def test_seeded_sampling_equals_transformers_generate_token_for_token(config, smollm2):
    model, tokenizer = smollm2
    prompt_ids = labkit.chat_prompt(tokenizer, "Tell me a story about a cat.")
    config = config.replace(max_new_tokens=16, seed=3)
    ours = labkit.generate_ids(model, tokenizer, prompt_ids, config=config)
    assert ours == hf_sample(model, prompt_ids, 3, **config.hf_kwargs())


def test_seeded_sampling_is_reproducible_and_seeds_differ(tokenizer):
    model = labkit.tiny_model("labkit")
    config = DecodingConfig(temperature=1.0, top_k=200, top_p=0.95, max_new_tokens=20)

    def run(seed):
        return labkit.generate_ids(model, tokenizer, "Hi", config=config.replace(seed=seed))

    assert run(1) == run(1)
    assert run(1) != run(2)
    assert labkit.generate_ids(
        model, tokenizer, "Hi", max_new_tokens=20, temperature=1.0, top_k=200, top_p=0.95, seed=1
    ) == run(1)


def test_banned_tokens_and_min_new_tokens_act_in_generate(tokenizer):
    model = labkit.tiny_model("labkit")
    free = labkit.generate_ids(model, tokenizer, "Hi", max_new_tokens=6)
    banned = labkit.generate_ids(model, tokenizer, "Hi", max_new_tokens=6, banned_tokens=(free[0],))
    assert banned[0] != free[0]
    bias = labkit.generate_ids(model, tokenizer, "Hi", max_new_tokens=3, logit_bias={42: 100.0})
    assert bias == [42, 42, 42]


@pytest.mark.slow
def test_min_new_tokens_keeps_a_chat_answer_going(smollm2):
    model, tokenizer = smollm2
    prompt = labkit.chat_prompt(tokenizer, "What is the capital of France?")
    short = labkit.generate_ids(model, tokenizer, prompt, max_new_tokens=30)
    longer = labkit.generate_ids(model, tokenizer, prompt, max_new_tokens=30, min_new_tokens=len(short) + 3)
    assert short[-1] == tokenizer.eos_token_id and len(longer) >= len(short) + 3


def test_presets_are_valid_configs():
    assert set(presets()) == {"chat", "code", "creative", "precise"}
    assert preset("chat").do_sample and not preset("code").do_sample and preset("precise").num_beams > 1
    with pytest.raises(ValueError, match="Unknown preset 'poetry'"):
        preset("poetry")
