"""One request object from the route to the engine: `RequestSpec` is the only way options reach the engine,
the engine's output carries each token's log-probability, and what the engine refuses names its argument."""

import inspect

import pytest

from labkit.core.arguments import InvalidArgument
from labkit.decoding.config import DecodingConfig
from labkit.serving.engine import Engine
from labkit.serving.http.engine_thread import EngineThread
from labkit.serving.http.model_service import ModelService, refused_option
from labkit.serving.request_spec import RequestSpec
from labkit.serving.step_output import Output


def parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_server_hands_the_engine_one_object_and_nothing_beside_it():
    assert parameters(ModelService.submit) == ["self", "spec"]
    assert parameters(EngineThread.submit) == ["self", "spec"]
    assert inspect.signature(ModelService.submit).parameters["spec"].annotation in (
        "RequestSpec",
        RequestSpec,
    )


def test_add_request_builds_the_same_object_from_keywords(tiny, tokenizer):
    by_keywords, whole = Engine(tiny, tokenizer), Engine(tiny, tokenizer)
    a = by_keywords.add_request([5, 6, 7], max_new_tokens=4, n=2, logprobs=1, arrival_s=0.5)
    spec = RequestSpec([5, 6, 7], DecodingConfig(max_new_tokens=4), n=2, logprobs=1, arrival_s=0.5)
    b = whole.add_request(spec)
    seq_a, seq_b = by_keywords.requests[a], whole.requests[b]
    assert seq_a.config == seq_b.config and seq_a.arrival_s == seq_b.arrival_s == 0.5
    assert len(by_keywords.samples(a)) == len(whole.samples(b)) == 2
    assert by_keywords.run_until_done() == whole.run_until_done()


def test_a_spec_is_taken_whole(tiny, tokenizer):
    engine = Engine(tiny, tokenizer)
    with pytest.raises(TypeError, match="takes a RequestSpec whole.*max_new_tokens"):
        engine.add_request(RequestSpec([1, 2, 3]), max_new_tokens=3)
    with pytest.raises(TypeError, match="config"):
        engine.add_request(RequestSpec([1, 2, 3]), DecodingConfig())


def test_each_output_carries_its_tokens_log_probability(tiny, tokenizer):
    engine = Engine(tiny, tokenizer)
    asked = engine.add_request([5, 6, 7], max_new_tokens=5, logprobs=2)
    plain = engine.add_request([8, 9], max_new_tokens=5)
    outputs = engine.run_until_done()
    assert all(isinstance(out, Output) for out in outputs)
    carried = [out.logprob for out in outputs if out.request_id == asked]
    assert carried == engine.logprobs(asked) and len(carried) == 5
    assert [out.token_id for out in outputs if out.request_id == asked] == [lp.token_id for lp in carried]
    assert all(out.logprob is None for out in outputs if out.request_id == plain)


@pytest.mark.parametrize(
    "options, parameter, message",
    [
        ({"n": 0}, "n", "n must be a whole number of 1 or more"),
        ({"n": 1.5}, "n", "n must be a whole number"),
        ({"logprobs": 21}, "logprobs", "logprobs must be a whole number from 0 to 20"),
        ({"config": {"max_new_tokens": 3}}, "config", "config must be a DecodingConfig"),
        ({"arrival_s": "now"}, "arrival_s", "arrival_s must be a time in seconds"),
        ({"fields": {"n": 1}}, "fields", "fields must map the engine's argument names"),
        ({"max_draft": -1}, "max_draft", "max_draft must be a whole number of 0 or more"),
    ],
)
def test_a_bad_spec_names_its_field(options, parameter, message):
    with pytest.raises(InvalidArgument, match=message) as caught:
        RequestSpec([1, 2, 3], **options)
    assert caught.value.parameter == parameter


def test_what_the_engine_refuses_is_renamed_to_the_clients_field(tiny, tokenizer):
    engine = Engine(tiny, tokenizer, max_num_seqs=2)
    spec = RequestSpec([1, 2, 3], DecodingConfig(max_new_tokens=2), n=3, fields={"n": "n"})
    with pytest.raises(InvalidArgument) as caught:
        engine.add_request(spec)
    assert caught.value.parameter == "n" and "n must be at most 2" in str(caught.value)
    error = refused_option(caught.value, spec.fields)
    assert (error.status, error.param) == (400, "n") and error.message.startswith("'n' must be at most 2")
    too_long = RequestSpec(
        [1] * 10, DecodingConfig(max_new_tokens=10**6), fields={"max_new_tokens": "max_tokens"}
    )
    with pytest.raises(InvalidArgument) as caught:
        engine.add_request(too_long)
    assert refused_option(caught.value, too_long.fields).param == "max_tokens"
    assert not engine.requests  # nothing refused was queued
