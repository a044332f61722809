"""Bad input at the door: every public decoding entry point refuses a bad argument when it is called,
before the model runs once (generate's iterator included), with an error that names the argument; and
the same mistake gives the same kind of error whichever entry point it is given to. (load_model's own
checks are in tests/models/test_bad_input.py.)"""

import pytest
import torch

import labkit
import labkit.core.forward
from labkit.decoding.config import DecodingConfig
from labkit.decoding.mbr import mbr_decode
from labkit.decoding.mirostat import mirostat_generate
from labkit.decoding.search import beam_search

VOCAB = 49152  # SmolLM2's vocabulary, shared by the tiny models

ENTRY_POINTS = {
    "generate": labkit.generate,
    "generate_text": labkit.generate_text,
    "generate_ids": labkit.generate_ids,
    "beam_search": beam_search,
    "mbr_decode": mbr_decode,
    "mirostat_generate": mirostat_generate,
    "speculative_generate": labkit.speculative_generate,
}
# chat takes messages, not a prompt; "Hi" is a valid one, so it shares the option tests.
WITH_CHAT = {**ENTRY_POINTS, "chat": labkit.chat}

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def model(tiny, monkeypatch):
    """The tiny model, with the one seam that runs it booby-trapped: a bad argument must be refused first."""

    def must_not_run(*args, **kwargs):
        raise AssertionError("the model ran: the bad argument was not refused before generation")

    monkeypatch.setattr(labkit.core.forward, "forward", must_not_run)
    return tiny


@pytest.mark.parametrize("name", WITH_CHAT)
def test_a_valid_call_still_runs(tiny, tokenizer, name):
    """The control: the checks below refuse mistakes, not ordinary calls."""
    extra = {"n_samples": 2} if name == "mbr_decode" else {}
    result = WITH_CHAT[name](tiny, tokenizer, "Hi", max_new_tokens=2, **extra)
    if name == "generate":
        assert 1 <= len(list(result)) <= 2


# --- prompts ---------------------------------------------------------------------------------------------

BAD_PROMPTS = [
    pytest.param({"text": "Hi"}, TypeError, "prompt must be text", id="dict"),
    pytest.param(None, TypeError, "prompt must be text", id="None"),
    pytest.param(7, TypeError, "prompt must be text", id="int"),
    pytest.param(b"Hi", TypeError, "prompt must be text", id="bytes"),
    pytest.param(torch.tensor([1.0, 2.0]), TypeError, "prompt tensor must hold integer", id="float-tensor"),
    pytest.param(torch.tensor([True, False]), TypeError, "prompt tensor must hold integer", id="bool-tensor"),
    pytest.param(torch.tensor([[1, 2], [3, 4]]), ValueError, r"One prompt at a time.*\(2, 2\)", id="2-rows"),
    pytest.param(torch.tensor([[[1, 2]]]), ValueError, "One prompt at a time", id="3-d-tensor"),
    pytest.param([1, 2.0], TypeError, "prompt list must hold integer", id="list-with-float"),
    pytest.param([1, True], TypeError, "prompt list must hold integer", id="list-with-bool"),
    pytest.param(["Hi"], TypeError, "prompt list must hold integer", id="list-of-str"),
    pytest.param("", ValueError, "prompt is empty", id="empty-str"),
    pytest.param([], ValueError, "prompt is empty", id="empty-list"),
    pytest.param(torch.tensor([], dtype=torch.long), ValueError, "prompt is empty", id="empty-tensor"),
    pytest.param(
        [5, -1],
        ValueError,
        r"prompt holds token ids outside the vocabulary \[0, 49152\): \[-1\]",
        id="id-minus-1",
    ),
    pytest.param([5, VOCAB], ValueError, r"prompt holds token ids outside .*\[49152\]", id="id-49152"),
    pytest.param(
        torch.tensor([[5, VOCAB]]), ValueError, "prompt holds token ids outside", id="tensor-id-49152"
    ),
]


@pytest.mark.parametrize("prompt, error, match", BAD_PROMPTS)
@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_bad_prompt_is_refused_by_every_entry_point(model, tokenizer, name, prompt, error, match):
    with pytest.raises(error, match=match):
        ENTRY_POINTS[name](model, tokenizer, prompt)  # generate: the call itself raises, nothing iterated


# --- decoding options: the same mistake, the same error everywhere ----------------------------------------

BAD_OPTIONS = [
    pytest.param(
        {"logit_bias": {VOCAB: 1.0}},
        ValueError,
        r"logit_bias names token ids outside .*\[49152\]",
        id="logit_bias-past-vocab",
    ),
    pytest.param(
        {"logit_bias": {60000: 1.0, 3: 1.0}},
        ValueError,
        r"logit_bias .*\[60000\]",
        id="logit_bias-far-past-vocab",
    ),
    pytest.param(
        {"logit_bias": {-1: 1.0}}, ValueError, "logit_bias keys must be token ids", id="logit_bias-negative"
    ),
    pytest.param(
        {"banned_tokens": [VOCAB]},
        ValueError,
        r"banned_tokens names token ids outside .*\[49152\]",
        id="banned_tokens-past-vocab",
    ),
    pytest.param(
        {"banned_tokens": [3, -1]}, ValueError, "banned_tokens must be token ids", id="banned_tokens-negative"
    ),
    pytest.param(
        {"config": DecodingConfig(), "max_new_tokens": 64},
        ValueError,
        "not both",
        id="config-and-default-option",
    ),
    pytest.param(
        {"config": DecodingConfig(temperature=1.0), "seed": 1},
        ValueError,
        r"config=.*seed.*not both",
        id="config-and-seed",
    ),
    pytest.param(
        {"config": {"temperature": 1.0}},
        TypeError,
        "config must be a labkit DecodingConfig",
        id="config-a-dict",
    ),
    pytest.param(
        {"top_n": 3},
        TypeError,
        r"unknown option\(s\) top_n; decoding options are: max_new_tokens, temperature, top_k, top_p",
        id="unknown-option",
    ),
    pytest.param(
        {"max_new_tokens": -1}, ValueError, "max_new_tokens must be an integer >= 0", id="max_new_tokens"
    ),
]


@pytest.mark.parametrize("options, error, match", BAD_OPTIONS)
@pytest.mark.parametrize("name", WITH_CHAT)
def test_bad_option_gives_the_same_error_at_every_entry_point(model, tokenizer, name, options, error, match):
    with pytest.raises(error, match=match):
        WITH_CHAT[name](model, tokenizer, "Hi", **options)


@pytest.mark.parametrize(
    "options, match",
    [
        pytest.param({"banned_tokens": 5}, "banned_tokens", id="banned_tokens-an-int"),
        pytest.param({"logit_bias": 5}, "logit_bias", id="logit_bias-an-int"),
    ],
)
def test_a_wrong_type_for_banned_tokens_or_logit_bias_names_the_option(model, tokenizer, options, match):
    with pytest.raises((TypeError, ValueError), match=match):
        labkit.generate(model, tokenizer, "Hi", **options)


@pytest.mark.parametrize("name", ["generate", "mirostat_generate", "speculative_generate"])
def test_a_generator_that_is_not_a_torch_generator_is_refused_at_call_time(model, tokenizer, name):
    options = {} if name == "mirostat_generate" else {"temperature": 1.0}
    with pytest.raises(TypeError, match="generator"):
        ENTRY_POINTS[name](model, tokenizer, "Hi", generator=42, **options)


# --- chat messages -----------------------------------------------------------------------------------------

BAD_MESSAGES = [
    pytest.param(
        [{"content": "Hi"}],
        ValueError,
        r"messages\[0\] must be a dict with 'role' and 'content'",
        id="no-role",
    ),
    pytest.param(
        [{"role": "user"}],
        ValueError,
        r"messages\[0\] must be a dict with 'role' and 'content'",
        id="no-content",
    ),
    pytest.param(
        [{"role": "user", "content": "Hi"}, {"role": "user"}],
        ValueError,
        r"messages\[1\] must be a dict",
        id="second-without-content",
    ),
    pytest.param(["Hi"], ValueError, r"messages\[0\] must be a dict", id="list-of-str"),
    pytest.param(
        [{"role": "robot", "content": "Hi"}],
        ValueError,
        r"messages\[0\]\['role'\] must be one of system, user, assistant, got 'robot'",
        id="bad-role",
    ),
    pytest.param(
        [{"role": "user", "content": 3}],
        TypeError,
        r"messages\[0\]\['content'\] must be text, got int",
        id="int-content",
    ),
    pytest.param(
        [{"role": "user", "content": ["Hi"]}],
        TypeError,
        r"messages\[0\]\['content'\] must be text",
        id="list-content",
    ),
    pytest.param([], TypeError, "messages must be a question .* non-empty list", id="empty-list"),
    pytest.param({"role": "user", "content": "Hi"}, TypeError, "messages must be .* got dict", id="a-dict"),
    pytest.param(("Hi",), TypeError, "messages must be .* got tuple", id="a-tuple"),
    pytest.param(None, TypeError, "messages must be .* got NoneType", id="None"),
]


@pytest.mark.parametrize("messages, error, match", BAD_MESSAGES)
@pytest.mark.parametrize("entry", ["chat_prompt", "chat"])
def test_bad_chat_messages_are_refused(model, tokenizer, entry, messages, error, match):
    with pytest.raises(error, match=match):
        if entry == "chat_prompt":
            labkit.chat_prompt(tokenizer, messages)
        else:
            labkit.chat(model, tokenizer, messages, max_new_tokens=2)


# --- options of one entry point ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, match",
    [
        pytest.param(
            {"temperature": 1.0, "top_k": 5},
            r"mirostat_generate\(\) uses only max_new_tokens, seed.*"
            r"temperature, top_k would have no effect",
            id="top_k",
        ),
        pytest.param({"top_k": 5}, "top_k", id="top_k-greedy"),
        pytest.param({"temperature": 0.7}, "temperature would have no effect", id="temperature"),
        pytest.param(
            {"repetition_penalty": 1.2}, "repetition_penalty would have no effect", id="repetition_penalty"
        ),
        pytest.param({"num_beams": 2}, "num_beams would have no effect", id="num_beams"),
        pytest.param({"stop": ["."]}, "stop would have no effect", id="stop"),
        pytest.param(
            {"config": DecodingConfig(temperature=0.8, top_p=0.9)},
            "temperature, top_p would have no effect",
            id="config",
        ),
    ],
)
def test_mirostat_refuses_options_it_would_ignore(model, tokenizer, options, match):
    with pytest.raises(ValueError, match=match):
        mirostat_generate(model, tokenizer, "Hi", **options)


MIROSTAT_BAD = {
    "tau": [0, -1.0, float("inf"), float("nan"), "3", True, None],
    "eta": [0, -0.1, 1.5, float("nan"), "0.1", True, None],
    "version": [0, 3, True, "2", None],
}


@pytest.mark.parametrize("argument, value", [(a, v) for a, values in MIROSTAT_BAD.items() for v in values])
def test_mirostat_refuses_bad_tau_eta_version(model, tokenizer, argument, value):
    with pytest.raises(ValueError, match=f"{argument} must be"):
        mirostat_generate(model, tokenizer, "Hi", **{argument: value})


@pytest.mark.parametrize(
    "name, options, error, match",
    [
        ("mbr_decode", {"n_samples": 1}, ValueError, "n_samples must be a whole number of 2 or more, got 1"),
        (
            "mbr_decode",
            {"n_samples": 4.0},
            ValueError,
            "n_samples must be a whole number of 2 or more, got 4.0",
        ),
        (
            "mbr_decode",
            {"n_samples": True},
            ValueError,
            "n_samples must be a whole number of 2 or more, got True",
        ),
        (
            "mbr_decode",
            {"similarity": "bleu"},
            ValueError,
            "Unknown similarity 'bleu'; choose one of: chrf, token_f1",
        ),
        ("mbr_decode", {"temperature": 0}, ValueError, r"temperature > 0"),
        ("beam_search", {"temperature": 0.7}, ValueError, "temperature"),
        ("beam_search", {"num_beams": 0}, ValueError, "num_beams must be an integer >= 1"),
        ("beam_search", {"num_return_sequences": 5}, ValueError, r"num_return_sequences .*num_beams=4"),
        ("generate", {"temperature": 0, "top_p": 0.9}, ValueError, "top_p=0.9 only acts when sampling"),
        (
            "speculative_generate",
            {"gamma": 0},
            ValueError,
            "gamma must be a whole number of 1 or more .*, got 0",
        ),
        (
            "speculative_generate",
            {"gamma": 2.0},
            ValueError,
            "gamma must be a whole number of 1 or more .*, got 2.0",
        ),
        (
            "speculative_generate",
            {"gamma": True},
            ValueError,
            "gamma must be a whole number of 1 or more .*, got True",
        ),
        ("speculative_generate", {"drafter": object()}, TypeError, "drafter must have propose"),
        ("speculative_generate", {"num_beams": 2}, ValueError, "num_beams must be 1"),
        ("speculative_generate", {"stop": ["."]}, ValueError, "stop empty"),
    ],
)
def test_entry_point_specific_arguments_are_checked(model, tokenizer, name, options, error, match):
    with pytest.raises(error, match=match):
        ENTRY_POINTS[name](model, tokenizer, "Hi", **options)


def test_speculative_target_must_be_a_model(tokenizer):
    with pytest.raises(TypeError, match="target must be a causal LM .* got str"):
        labkit.speculative_generate("smollm2-135m", tokenizer, "Hi")
