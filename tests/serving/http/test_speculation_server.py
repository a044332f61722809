"""A speculating server, in process on the tiny model: answers equal the engine's without speculation,
each answer's `timings` and /metrics count the drafts (llama-server's and vLLM's names), a request's
`speculative.n_max` caps its drafts (0: none), and a bad one is a 400 naming the field."""

import asyncio
import json

import httpx
import pytest

import labkit
from labkit.loadtest.load import load_test
from labkit.loadtest.metrics_page import metric_value
from labkit.serving.http.app import build_app
from labkit.serving.http.server import parse_args
from labkit.serving.speculation import Speculation

from .test_protocol import NAME, post

SERVICE_OPTIONS = {"speculation": Speculation(max_draft=4)}
PROMPT = "a b c d a b c d a b c d"  # the tiny model's greedy answer repeats: prompt lookup drafts are kept


def completion(service, **extra) -> dict:
    body = {"model": NAME, "prompt": PROMPT, "max_tokens": 20, "temperature": 0, **extra}
    answer = post(service, "/v1/completions", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_drafts_change_no_answer_and_are_counted(service, tokenizer, one_thread):
    model = labkit.tiny_model("labkit", seed=0)  # the service's weights
    plain = labkit.generate_text(model, tokenizer, PROMPT, max_new_tokens=20)
    drafted = completion(service)
    assert drafted["choices"][0]["text"] == plain
    timings = drafted["timings"]
    assert timings["predicted_n"] == drafted["usage"]["completion_tokens"] == 20
    assert 0 < timings["draft_n_accepted"] <= timings["draft_n"]
    off = completion(service, **{"speculative.n_max": 0})
    assert off["choices"][0]["text"] == plain and off["timings"]["draft_n"] == 0
    capped = completion(service, **{"speculative.n_max": 1})
    assert capped["choices"][0]["text"] == plain and 0 < capped["timings"]["draft_n"] <= 20


def test_metrics_count_every_answers_drafts(service, one_thread):
    async def metrics_text() -> str:
        transport = httpx.ASGITransport(app=build_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return (await client.get("/metrics")).text

    before = asyncio.run(metrics_text())
    answers = [completion(service), completion(service, **{"speculative.n_max": 2})]
    after = asyncio.run(metrics_text())
    for name, field in (
        ("labkit_spec_decode_num_draft_tokens_total", "draft_n"),
        ("labkit_spec_decode_num_accepted_tokens_total", "draft_n_accepted"),
    ):
        counted = metric_value(after, name) - metric_value(before, name)
        assert counted == sum(answer["timings"][field] for answer in answers) > 0


def test_streamed_usage_carries_the_timings(service, one_thread):
    body = {"model": NAME, "prompt": PROMPT, "max_tokens": 20, "temperature": 0, "stream": True}
    body["stream_options"] = {"include_usage": True}
    answer = post(service, "/v1/completions", json=body)
    frames = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
    last = json.loads(frames[-2])  # before [DONE]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == last["timings"]["predicted_n"]
    assert last["timings"]["draft_n_accepted"] > 0


def test_a_bad_n_max_is_a_400_naming_it(service):
    for value in (-1, 65, "4"):
        answer = post(
            service, "/v1/completions", json={"model": NAME, "prompt": "Hi", "speculative.n_max": value}
        )
        assert answer.status_code == 400
        assert answer.json()["error"]["param"] == "speculative.n_max"


def test_the_command_line_turns_speculation_on(capsys):
    options = parse_args(["--speculative-tokens", "3"]).options
    assert options.speculation() == Speculation(max_draft=3)
    assert parse_args(options.argv()).options == options
    assert parse_args([]).options.speculation() is None
    early = parse_args(["--speculative-tokens", "2", "--draft-exit-layer", "8"]).options
    assert early.speculation() == Speculation("early_exit", max_draft=2, exit_layer=8)
    assert parse_args(early.argv()).options == early
    for argv, words in (
        (["--draft-exit-layer", "8"], "set speculative_tokens too"),
        (["--speculative-tokens", "2", "--draft-exit-layer", "0"], "draft_exit_layer must be"),
    ):
        with pytest.raises(SystemExit):
            parse_args(argv)
        assert words in capsys.readouterr().err


def test_the_load_tester_sends_extra_fields_and_keeps_each_answers_timings(service, one_thread):
    """labkit.loadtest's closed loop (`bench spec`'s) with a chat of its own and llama-server's per-request
    field: drafts are counted in each streamed answer's `engine`, and none with n_max 0."""

    def chat(index: int, tag: str) -> list[dict]:
        return [{"role": "user", "content": f"{tag} {index}: {PROMPT}"}]

    async def both():
        transport = httpx.ASGITransport(app=build_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as http:
            drafted = await load_test(http, NAME, 2, 1, 16, tag="x", chat=chat)
            plain = await load_test(
                http, NAME, 2, 1, 16, tag="x", chat=chat, extra_body={"speculative.n_max": 0}
            )
            return drafted, plain

    drafted, plain = asyncio.run(both())
    assert [r.text for r in drafted.requests] == [r.text for r in plain.requests]
    assert all(r.engine["predicted_n"] == r.output_tokens for r in drafted.ok + plain.ok)
    assert sum(r.engine["draft_n"] for r in drafted.ok) > 0 == sum(r.engine["draft_n"] for r in plain.ok)
    with pytest.raises(ValueError, match="extra_body goes with the OpenAI protocol only"):
        asyncio.run(load_test(None, NAME, 1, protocol="ollama", extra_body={"speculative.n_max": 0}))
    with pytest.raises(TypeError, match="chat must be a function of"):
        asyncio.run(load_test(None, NAME, 1, chat="copy"))
