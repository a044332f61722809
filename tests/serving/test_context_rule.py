"""The context rule (labkit.core.forward.check_context) is checked once per engine request, where the request
is made (check_request), against the smaller of the model's context and the scheduler's max_model_len; its
refusal names the prompt or max_new_tokens, which a server renames to its client's field."""

import dataclasses
import sys

import pytest

import labkit.core.forward
from labkit.core.arguments import InvalidArgument
from labkit.core.forward import context_length
from labkit.serving.engine import Engine


@pytest.fixture
def context_checks(monkeypatch):
    """Every call of check_context from now on, wherever labkit imported it: (prompt, new tokens, context)."""
    calls, original = [], labkit.core.forward.check_context

    def counted(prompt_length, max_new_tokens, context):
        calls.append((prompt_length, max_new_tokens, context))
        return original(prompt_length, max_new_tokens, context)

    for name, module in list(sys.modules.items()):
        if name.startswith("labkit") and getattr(module, "check_context", None) is original:
            monkeypatch.setattr(module, "check_context", counted)
    return calls


def with_max_model_len(engine: Engine, max_model_len: int) -> Engine:
    """The engine with its scheduler's max_model_len set (the engine itself sets the model's context)."""
    engine.config = engine.scheduler.config = dataclasses.replace(engine.config, max_model_len=max_model_len)
    return engine


def test_an_engine_request_checks_the_context_once(tiny, tokenizer, one_thread, context_checks):
    engine = Engine(tiny, tokenizer, max_num_seqs=2)
    request_id = engine.add_request([5] * 10, max_new_tokens=3)
    while engine.has_unfinished():
        engine.step()
    assert engine.requests[request_id].finish_reason == "length"
    assert context_checks == [(10, 3, context_length(tiny))]  # once, at add_request; not again when scheduled


def test_the_one_check_holds_a_request_to_the_smaller_of_the_two(tiny, tokenizer, context_checks):
    engine = with_max_model_len(Engine(tiny, tokenizer, n_blocks=64, block_size=4), 32)
    with pytest.raises(InvalidArgument, match="context holds 32") as refused:
        engine.add_request([5] * 30, max_new_tokens=4)
    assert (refused.value.parameter, refused.value.value) == ("max_new_tokens", 4)
    with pytest.raises(InvalidArgument, match="prompt alone has 32 tokens") as refused:
        engine.add_request([5] * 32, max_new_tokens=1)
    assert (refused.value.parameter, refused.value.value) == ("prompt", 32)
    engine.add_request([5] * 28, max_new_tokens=4)  # fits exactly
    assert len(context_checks) == 3 and engine.has_unfinished()
    roomy = with_max_model_len(Engine(tiny, tokenizer, n_blocks=512, block_size=4), 10 * context_length(tiny))
    # the model's, smaller
    with pytest.raises(InvalidArgument, match=f"context holds {context_length(tiny)}"):
        roomy.add_request([5] * 10, max_new_tokens=context_length(tiny))
