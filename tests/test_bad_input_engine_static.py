"""The serving engine and the static decoder check their arguments when called: each bad one raises a
labkit error that names it, before any model work (tiny model, SmolLM2's tokenizer without its weights)."""

import pytest
import torch

import labkit
from labkit.fast.static import StaticDecoder
from labkit.models.loading import load_tokenizer
from labkit.serving.engine import Engine


@pytest.fixture(scope="module")
def tiny():
    return labkit.tiny_model("labkit", seed=0)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("smollm2-135m")


@pytest.mark.parametrize("options, named", [
    ({"max_num_seqs": 0}, "max_num_seqs"), ({"max_num_seqs": 2.0}, "max_num_seqs"),
    ({"block_size": True}, "block_size"), ({"n_blocks": 0}, "n_blocks"), ({"n_blocks": 4.5}, "n_blocks"),
    ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),  # was replaced by the default without a word
    ({"step_history": -1}, "step_history"), ({"step_history": "10"}, "step_history"),
])
def test_engine_options_are_checked_and_named(tiny, tokenizer, options, named):
    with pytest.raises(ValueError, match=named):
        Engine(tiny, tokenizer, **options)


def test_engine_refuses_a_missing_tokenizer_and_a_model_that_is_not_labkits(tiny, tokenizer):
    with pytest.raises(TypeError, match="tokenizer must be the model's tokenizer"):
        Engine(tiny, None)
    with pytest.raises(TypeError, match="labkit's from-scratch Llama"):
        Engine(torch.nn.Linear(2, 2), tokenizer)


def test_generate_batch_takes_a_list_of_prompts_not_one_string(tiny, tokenizer):
    engine = Engine(tiny, tokenizer)
    with pytest.raises(ValueError, match=r"prompts must be a list of prompts .*wrap one prompt as \[prompt\]"):
        engine.generate_batch("Hello there", max_new_tokens=2)  # was: one prompt per character
    assert not engine.has_unfinished() and engine.requests == {}
    assert len(engine.generate_batch(["Hello", "The sea"], max_new_tokens=2)) == 2


def test_unknown_request_ids_are_named(tiny, tokenizer):
    engine = Engine(tiny, tokenizer)
    with pytest.raises(KeyError, match="No request with id 7"):
        engine.abort(7)
    with pytest.raises(KeyError, match=r"\(7: no such request\)"):
        engine.release(7)


@pytest.mark.parametrize("prompt_ids, max_new_tokens, message", [
    ("Hello there", 4, "prompt_ids must be a list of token ids"),  # text where ids are expected
    ([1, 2, 1.5], 4, "prompt_ids must be a list of token ids"),
    ([1, 2, 10**9], 4, r"outside the vocabulary \[0, "),
    ([1, -3], 4, r"outside the vocabulary \[0, "),
    ([1, 2, 3], 2.5, "max_new_tokens must be a whole number of 1 or more, got 2.5"),
    ([1, 2, 3], 0, "max_new_tokens must be a whole number of 1 or more, got 0"),
    ([], 4, "at least one of each"),
    (list(range(1, 40)), 30, "must fit this decoder's 64 slots"),
])
def test_static_decoder_checks_a_request_before_running_it(tiny, prompt_ids, max_new_tokens, message):
    decoder = StaticDecoder(tiny, 64)
    for generate in (decoder.generate, decoder.generate_with_lookup):
        with pytest.raises(ValueError, match=message):
            generate(prompt_ids, max_new_tokens)
    assert len(decoder.generate([1, 2, 3], 2)) == 2  # and it still runs
