"""n samples and log-probabilities in the HTTP layer on the tiny random model, in process (milliseconds): the
engine thread delivers every sample's tokens with its index and a last event per sample, releases the
group once all are done, and aborts every sample of a request dropped unread; tokens are spelled with their
exact bytes (part of a character included); each protocol's logprob shape, and how many alternatives each
request model asks the engine for. The real model behind the official clients is in test_n_and_logprobs.py."""

import asyncio
import time

import pytest

from labkit.decoding.config import DecodingConfig
from labkit.serving.http.errors import ClientError
from labkit.serving.http.fields import parse
from labkit.serving.http.logprobs import (
    TokenSpeller,
    chat_logprobs,
    completion_logprobs,
    ollama_logprobs,
    text_offsets,
)
from labkit.serving.http.model_service import collect
from labkit.serving.http.ollama_protocol import GenerateRequest
from labkit.serving.http.openai_protocol import ChatCompletionRequest, CompletionRequest
from labkit.serving.request import TokenLogprob
from labkit.serving.request_spec import RequestSpec

SEATS = 4
SERVICE_OPTIONS = {"max_num_seqs": SEATS}  # the module's `service` (tests/conftest.py)


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.01)


def aborted(service) -> float:
    registry = service.engine_thread.metrics.registry
    return registry.get_sample_value("labkit_requests_finished_total", {"reason": "abort"}) or 0.0


def test_every_sample_arrives_with_its_index_logprobs_and_last_event(service, one_thread):
    config = DecodingConfig(max_new_tokens=5, temperature=1.0, seed=3)

    async def three_samples():
        submitted = await service.submit(RequestSpec([1, 2, 3, 4, 5], config, n=3, logprobs=2))
        return submitted, await collect(service.events(submitted, request=None), submitted.n)

    submitted, samples = asyncio.run(three_samples())
    assert submitted.n == 3 and len(samples) == 3
    for sample in samples:
        assert len(sample.tokens) == 5 and sample.last.finish_reason == "length"
        assert sample.last.metrics.output_tokens == 5
        assert all(
            len(event.logprob.top) == 2 and event.logprob.token_id == event.token_id
            for event in sample.tokens
        )
    # released once every sample is done: a server keeps no finished one
    engine_thread = service.engine_thread
    wait_for(lambda: not engine_thread.groups and submitted.request_id not in engine_thread.engine.requests)
    assert not engine_thread.streams and not engine_thread.engine.requests


def test_a_request_of_n_dropped_unread_aborts_every_sample(service, one_thread):
    before = aborted(service)

    async def submit_and_forget() -> None:
        await service.submit(
            RequestSpec([1, 2, 3, 4], DecodingConfig(max_new_tokens=200), n=3)
        )  # nobody reads its events

    asyncio.run(submit_and_forget())
    wait_for(lambda: aborted(service) == before + 3)
    wait_for(lambda: service.engine_thread.load.blocks_used == 0)
    assert not service.engine_thread.groups and not service.engine_thread.engine.requests


def test_more_samples_than_seats_are_refused_naming_n(service):
    with pytest.raises(ClientError) as caught:
        asyncio.run(
            service.submit(
                RequestSpec([1, 2, 3], DecodingConfig(max_new_tokens=2), n=SEATS + 1, fields={"n": "n"})
            )
        )
    assert (caught.value.status, caught.value.param) == (
        400,
        "n",
    ) and f"at most {SEATS}" in caught.value.message


def test_tokens_are_spelled_with_their_exact_bytes(tokenizer):
    speller = TokenSpeller(tokenizer)
    ids = tokenizer.encode("é 你", add_special_tokens=False)
    spelled = [speller(token_id) for token_id in ids]
    assert bytes(b for _, raw in spelled for b in raw).decode() == "é 你"  # a split character joins again
    # ...though its parts alone read as the replacement character
    assert "\ufffd" in [text for text, _ in spelled]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert speller(end) == ("<|im_end|>", list(b"<|im_end|>"))


def test_each_protocol_writes_the_same_logprobs_in_its_shape(tokenizer):
    sea, is_ = tokenizer.encode(" sea is", add_special_tokens=False)
    recorded = [TokenLogprob(sea, -0.5, ((sea, -0.5), (is_, -1.5))), TokenLogprob(is_, -3.0, ((sea, -0.2),))]
    chat = chat_logprobs(TokenSpeller(tokenizer), recorded)["content"]
    assert [(e["token"], e["logprob"], e["bytes"]) for e in chat] == [
        (" sea", -0.5, list(b" sea")),
        (" is", -3.0, list(b" is")),
    ]
    assert [t["token"] for t in chat[0]["top_logprobs"]] == [" sea", " is"]
    legacy = completion_logprobs(TokenSpeller(tokenizer), recorded, text_offsets([" sea", " is"], start=4))
    assert legacy == {
        "tokens": [" sea", " is"],
        "token_logprobs": [-0.5, -3.0],
        "top_logprobs": [{" sea": -0.5, " is": -1.5}, {" sea": -0.2, " is": -3.0}],  # chosen added
        "text_offset": [4, 8],
    }
    assert ollama_logprobs(TokenSpeller(tokenizer), recorded) == chat
    assert "top_logprobs" not in ollama_logprobs(TokenSpeller(tokenizer), [TokenLogprob(sea, -0.5, ())])[0]


def test_each_request_model_says_how_many_alternatives_the_engine_records():
    hi = [{"role": "user", "content": "Hi"}]
    chat = [
        parse(ChatCompletionRequest, {"model": "m", "messages": hi, **fields}).engine_logprobs
        for fields in ({}, {"logprobs": True}, {"logprobs": True, "top_logprobs": 4})
    ]
    # the last: not its field
    completions = [
        parse(CompletionRequest, {"model": "m", "prompt": "Hi", **fields}).engine_logprobs
        for fields in ({}, {"logprobs": 0}, {"logprobs": 5}, {"top_logprobs": 3})
    ]
    ollama = [
        parse(GenerateRequest, {"model": "m", "prompt": "Hi", **fields}).engine_logprobs
        for fields in ({}, {"top_logprobs": 0}, {"logprobs": True, "top_logprobs": 20})
    ]
    assert (chat, completions, ollama) == ([None, 0, 4], [None, 0, 5, None], [None, None, 20])
    budget = parse(CompletionRequest, {"model": "m", "prompt": "Hi", "thinking_token_budget": 8})
    assert budget.decoding_config(16).thinking_budget == 8
