"""The HTTP layer on the tiny random model, in process (milliseconds): NDJSON and SSE framing, each
protocol's error shape and status, the bounded queue, and an abandoned stream freeing its KV blocks.
The real model behind the official clients is in test_ollama.py, test_openai.py and test_faults.py."""

import asyncio
import json
import time

import httpx
import pytest

import labkit
from labkit.decoding.config import DecodingConfig
from labkit.serving.admission import EngineBusy
from labkit.serving.engine import Engine
from labkit.serving.http.app import build_app
from labkit.serving.http.engine_thread import EngineThread
from labkit.serving.http.server import exposure_warning, parse_args
from labkit.serving.http.server_options import ServerOptions
from labkit.serving.request_spec import RequestSpec

NAME = "tiny"  # the model the `service` fixture serves (tests/conftest.py)
SERVICE_OPTIONS = {"max_body_bytes": 10_000}


def post(service, path: str, **kwargs) -> httpx.Response:
    """One request to the app in process (the whole body, streamed or not)."""

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=build_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(path, **kwargs)

    return asyncio.run(send())


def test_ollama_stream_is_one_json_object_per_line_ending_with_stats(service, one_thread):
    body = {
        "model": NAME,
        "prompt": "The sea is",
        "raw": True,
        "options": {"temperature": 0, "num_predict": 5, "num_ctx": 4096},
    }
    response = post(service, "/api/generate", json=body)
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-ndjson"
    lines = response.text.split("\n")
    assert lines[-1] == "" and all(lines[:-1])  # newline-terminated, no blank line between objects
    chunks = [json.loads(line) for line in lines[:-1]]
    final = chunks[-1]
    assert [c["done"] for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert final["done_reason"] == "length" and final["eval_count"] == 5 and final["response"] == ""
    assert all(isinstance(final[k], int) for k in ("total_duration", "prompt_eval_duration", "eval_duration"))


def test_openai_stream_is_sse_ending_with_done(service, one_thread):
    body = {
        "model": NAME,
        "prompt": "The sea is",
        "max_tokens": 3,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    response = post(service, "/v1/completions", json=body)
    events = response.text.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    payloads = [json.loads(event.removeprefix("data: ")) for event in events[:-2]]
    assert payloads[-1]["choices"] == [] and payloads[-1]["usage"]["completion_tokens"] == 3
    assert payloads[-2]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    "path, body, status, message",
    [
        ("/api/chat", {"model": "other", "messages": []}, 404, "model 'other' not found"),
        ("/api/generate", {"model": NAME, "prompt": 5}, 400, "'prompt' must be a string"),
        (
            "/api/generate",
            {"model": NAME, "prompt": "Hi", "options": {"top_k": -1, "temperature": 1}},
            400,
            "'options.top_k' must be an integer >= 0",
        ),
        (
            "/api/generate",
            {"model": NAME, "prompt": "Hi", "options": {"repeat_last_n": 64}},
            400,
            "'options.repeat_last_n' is not supported",
        ),
        ("/api/generate", {"model": NAME, "prompt": "Hi", "options": {"num_predict": 600}}, 400, "at most"),
        ("/api/generate", {"model": NAME, "prompt": "word " * 600, "raw": True}, 400, "context holds 512"),
        ("/api/generate", {"model": NAME, "prompt": "x" * 20_000}, 413, "at most 10000"),
    ],
)
def test_ollama_errors_are_a_string_with_the_right_status(service, path, body, status, message):
    response = post(service, path, json=body)
    assert response.status_code == status
    assert set(response.json()) == {"error"} and message in response.json()["error"]


@pytest.mark.parametrize(
    "path, body, status, param",
    [
        (
            "/v1/chat/completions",
            {"model": "gpt-4", "messages": [{"role": "user", "content": "Hi"}]},
            404,
            "model",
        ),
        ("/v1/chat/completions", {"model": NAME}, 400, "messages"),
        (
            "/v1/chat/completions",
            {"model": NAME, "messages": [{"role": "user", "content": "Hi"}], "stream": 1},
            400,
            "stream",
        ),
        ("/v1/completions", {"model": NAME, "prompt": "Hi", "min_p": 2, "temperature": 1}, 400, "min_p"),
        ("/v1/completions", {"model": NAME, "prompt": "Hi", "stop": [""]}, 400, "stop"),
        ("/v1/completions", {"model": NAME, "prompt": "Hi", "logit_bias": {"49152": 5}}, 400, "logit_bias"),
        (
            "/v1/completions",
            {"model": NAME, "prompt": "Hi", "stream_options": {"include_usage": "yes"}},
            400,
            "stream_options.include_usage",
        ),
    ],
)
def test_openai_errors_have_message_type_param_code(service, path, body, status, param):
    error = post(service, path, json=body).json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["code"], error["param"]) == (status, param) and param.split(".")[-1] in error["message"]


def test_malformed_json_is_400_in_each_shape(service):
    assert "not valid JSON" in post(service, "/api/chat", content=b'{"model":').json()["error"]
    assert post(service, "/v1/completions", content=b"[]").json()["error"]["code"] == 400


def test_a_full_queue_refuses_at_once(one_thread):
    model, tokenizer = labkit.tiny_model(impl="labkit"), labkit.load_tokenizer("smollm2-135m")
    engine_thread = EngineThread(Engine(model, tokenizer, max_num_seqs=1, max_waiting=0))

    async def two_at_once():
        config = DecodingConfig(max_new_tokens=4)
        first = asyncio.ensure_future(engine_thread.submit(RequestSpec([1, 2, 3], config)))
        second = asyncio.ensure_future(engine_thread.submit(RequestSpec([4, 5, 6], config)))
        await asyncio.sleep(0.05)
        engine_thread.start()  # both wait in the inbox: the first takes the slot, the second finds no room
        return await asyncio.gather(first, second, return_exceptions=True)

    accepted, refused = asyncio.run(two_at_once())
    engine_thread.stop()
    assert accepted[0] == 0 and isinstance(refused, EngineBusy) and "busy" in str(refused)


def test_an_abandoned_stream_is_aborted_and_frees_its_blocks(service, one_thread):
    registry = service.engine_thread.metrics.registry

    def counted(name: str, **labels) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    aborted_before, tokens_before = (
        counted("labkit_requests_finished_total", reason="abort"),
        counted("labkit_generation_tokens_total"),
    )

    async def read_two_then_leave() -> int:
        submitted = await service.submit(RequestSpec([1, 2, 3, 4], DecodingConfig(max_new_tokens=200)))
        events = service.events(submitted, request=None)
        await anext(events), await anext(events)
        await events.aclose()  # what a cancelled streaming response does
        return submitted.request_id

    request_id = asyncio.run(read_two_then_leave())
    engine = service.engine_thread.engine
    deadline = time.monotonic() + 10
    while (
        counted("labkit_requests_finished_total", reason="abort") == aborted_before
        and time.monotonic() < deadline
    ):
        time.sleep(0.01)
    assert counted("labkit_requests_finished_total", reason="abort") == aborted_before + 1
    assert counted("labkit_generation_tokens_total") - tokens_before < 200  # stopped long before its limit
    assert request_id not in engine.requests  # released: a long-running server keeps no finished request
    while service.engine_thread.load.blocks_used and time.monotonic() < deadline:
        time.sleep(0.01)
    assert service.engine_thread.load.blocks_used == 0


def test_the_command_line_binds_this_machine_only_unless_told_and_warns_without_a_key():
    args = parse_args([])
    assert (args.host, args.port, args.model, args.api_key) == ("127.0.0.1", 8000, "smollm2-135m", None)
    args = parse_args(["--host", "0.0.0.0", "--port", "9000", "--max-num-seqs", "16", "--api-key", "k"])
    assert (args.host, args.port, args.max_num_seqs, args.api_key) == ("0.0.0.0", 9000, 16, "k")
    assert exposure_warning("127.0.0.1", None) is None and exposure_warning("localhost", None) is None
    assert "NO authentication" in exposure_warning("0.0.0.0", None)
    assert exposure_warning("0.0.0.0", "k") is None
    with pytest.raises(SystemExit):
        parse_args(["--max-num-seqs", "0"])


def test_the_command_line_and_start_server_share_one_set_of_options(capsys):
    assert parse_args([]).options == ServerOptions()
    args = parse_args(["--max-num-seqs", "4", "--chunked-prefill", "--max-num-batched-tokens", "64"])
    assert args.options == ServerOptions(max_num_seqs=4, chunked_prefill=True, max_num_batched_tokens=64)
    assert parse_args(args.options.argv()).options == args.options  # start_server runs exactly these
    assert args.options.scheduling() == "continuous batching, chunked prefill (64 tokens a step)"
    assert ServerOptions().scheduling() == "continuous batching (prefill first)"
    with pytest.raises(SystemExit):
        parse_args(["--max-num-seqs", "8", "--max-num-batched-tokens", "4"])
    assert "max_num_batched_tokens" in capsys.readouterr().err


def test_a_request_dropped_before_its_first_event_is_aborted(service, one_thread):
    registry = service.engine_thread.metrics.registry
    aborted_before = registry.get_sample_value("labkit_requests_finished_total", {"reason": "abort"}) or 0.0

    async def submit_and_forget() -> None:
        await service.submit(
            RequestSpec([1, 2, 3, 4], DecodingConfig(max_new_tokens=200))
        )  # nobody reads its events

    asyncio.run(submit_and_forget())
    deadline = time.monotonic() + 10
    while (
        registry.get_sample_value("labkit_requests_finished_total", {"reason": "abort"}) or 0.0
    ) == aborted_before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (
        registry.get_sample_value("labkit_requests_finished_total", {"reason": "abort"}) == aborted_before + 1
    )
    while service.engine_thread.load.blocks_used and time.monotonic() < deadline:
        time.sleep(0.01)
    assert service.engine_thread.load.blocks_used == 0


@pytest.mark.parametrize(
    "path, body, param",
    [
        (
            "/api/generate",
            {"model": NAME, "prompt": "Hi", "raw": True, "options": {"num_predict": 600}},
            "options.num_predict",
        ),
        ("/v1/completions", {"model": NAME, "prompt": "Hi", "max_tokens": 600}, "max_tokens"),
    ],
)
def test_one_context_check_gives_its_numbers_in_both_protocols(service, path, body, param):
    response = post(service, path, json=body)
    error = response.json()["error"]
    message = error if path.startswith("/api/") else error["message"]
    prompt = len(labkit.encode_prompt(service.tokenizer, "Hi"))
    assert response.status_code == 400
    assert message == (
        f"'{param}': The prompt has {prompt} tokens and 600 new ones were asked for, but the model's "
        f"context holds {service.context}. Shorten the prompt or ask for at most "
        f"{service.context - prompt} new tokens."
    )
    if isinstance(error, dict):  # OpenAI's error names the field in `param` too
        assert error["param"] == param


def test_arrival_is_stamped_when_the_handler_starts_so_ttft_counts_parsing(service, monkeypatch, one_thread):
    stamps = []
    submit = service.submit

    async def recording(spec):
        stamps.append((spec.arrival_s, time.perf_counter()))
        return await submit(spec)

    monkeypatch.setattr(service, "submit", recording)
    before = time.perf_counter()
    answer = post(
        service,
        "/api/generate",
        json={
            "model": NAME,
            "prompt": "The sea is",
            "stream": False,
            "options": {"temperature": 0, "num_predict": 2},
        },
    ).json()
    post(service, "/v1/completions", json={"model": NAME, "prompt": "The sea is", "max_tokens": 2})
    assert len(stamps) == 2 and all(before <= arrival <= submitted for arrival, submitted in stamps)
    arrival, submitted = stamps[0]
    # the engine's TTFT starts at arrival
    assert answer["prompt_eval_duration"] >= (submitted - arrival) * 1e9
