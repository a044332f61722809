"""The HTTP API fuzzed from its own OpenAPI document: schemathesis generates bodies that fit each route's
request model and bodies that break it, sends them to a live `labkit serve` (SmolLM2-135M on 127.0.0.1),
and requires no 5xx, a status and media type the document declares, an answer that fits its declared
schema, every 4xx in the route's protocol error shape, and every body that breaks the document refused
(negative_data_rejection: the document states the ranges the server enforces, and that null counts as
absent). Afterwards the server still answers, with no request left running and every KV block free. A
small broken app shows the same checks fail.

positive_data_acceptance stays off: some rules are not JSON Schema's to state (top_logprobs needs
"logprobs": true; a tool message answers an earlier assistant call), so a body that fits the document may
still be refused, with a 400 naming the field.

Bounded for CI: EXAMPLES bodies of each kind per route, and every token limit a body leaves open or sets
above MAX_NEW is set to MAX_NEW (a mistyped limit is left as it is, to be refused)."""

import json
import time

import httpx
import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.requests import Request
from starlette.responses import JSONResponse

from labkit.serving.http.ollama_protocol import ShowRequest
from labkit.serving.http.openapi import describe, request_body

SERVER_OPTIONS = {"max_num_seqs": 4}
EXAMPLES = 25  # per route and per kind (bodies that fit the schema, bodies that break it)
MAX_NEW = 3  # new tokens at most per generated answer
ROUTES = [
    ("GET", "/"),
    ("HEAD", "/"),
    ("GET", "/api/version"),
    ("HEAD", "/api/version"),
    ("GET", "/api/tags"),
    ("GET", "/api/ps"),
    ("POST", "/api/show"),
    ("POST", "/api/generate"),
    ("POST", "/api/chat"),
    ("GET", "/v1/models"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("GET", "/health"),
    ("GET", "/metrics"),
]


@schemathesis.check
def protocol_error_shape(ctx, response, case):
    """A 4xx carries its protocol's error: OpenAI's object (/v1/*), Ollama's string (everything else)."""
    if not 400 <= response.status_code < 500 or case.method.upper() == "HEAD":
        return None
    error = response.json().get("error")
    if case.path.startswith("/v1"):
        assert isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}, error
        assert error["code"] == response.status_code and isinstance(error["message"], str), error
    else:
        assert isinstance(error, str) and error, error
    return True


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    protocol_error_shape,
    negative_data_rejection,
]


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def bounded(body, path: str):
    """The body with each token limit that is absent or above MAX_NEW set to MAX_NEW (in place)."""

    def cap(holder: dict, limit: str, unlimited: tuple = ()) -> None:
        value = holder.get(limit)
        if value is None or is_int(value) and (value > MAX_NEW or value in unlimited):
            holder[limit] = MAX_NEW

    if not isinstance(body, dict):
        return body
    if path.startswith("/v1/"):
        cap(body, "max_tokens")
        cap(body, "max_completion_tokens")
    elif path in ("/api/generate", "/api/chat"):
        if body.get("options") is None:
            body["options"] = {}
        if isinstance(body["options"], dict):
            cap(body["options"], "num_predict", unlimited=(-1, -2))
    return body


def fuzz(schema, method: str, path: str, base_url: str | None = None, examples: int = EXAMPLES) -> None:
    """Send the route `examples` bodies of each kind and run CHECKS on every answer (raises on the first
    failure)."""
    operation = schema[path][method]
    modes = [GenerationMode.POSITIVE] + ([GenerationMode.NEGATIVE] if method == "POST" else [])
    for mode in modes:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def run(case):
            if method == "POST":
                case.body = bounded(case.body, path)
            response = case.call(base_url=base_url, timeout=120) if base_url else case.call()
            case.validate_response(response, checks=CHECKS)

        run()


@pytest.fixture(scope="module")
def api_schema(server):
    return schemathesis.openapi.from_url(server.url + "/openapi.json")


@pytest.mark.slow
def test_the_document_describes_every_route_and_the_bodies_the_routes_parse(api_schema):
    raw = api_schema.raw_schema
    declared = sorted((method.upper(), path) for path, ops in raw["paths"].items() for method in ops)
    assert declared == sorted(ROUTES)
    for method, path in ROUTES:
        if method == "POST":
            body = raw["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            assert "model" in raw["components"]["schemas"][body.rsplit("/", 1)[-1]]["required"]


@pytest.mark.slow
@pytest.mark.parametrize("method, path", ROUTES)
def test_every_route_survives_the_fuzzer(api_schema, server, method, path):
    fuzz(api_schema, method, path, base_url=server.url)


@pytest.mark.slow
def test_after_the_fuzz_the_server_answers_and_holds_nothing(server):
    answer = httpx.post(
        server.url + "/v1/completions",
        json={"model": "smollm2-135m", "prompt": "The sea is", "max_tokens": 2},
        timeout=60,
    )
    assert answer.status_code == 200 and answer.json()["choices"][0]["text"]
    deadline = time.monotonic() + 30  # the engine thread publishes its load after its step
    while True:
        metrics = httpx.get(server.url + "/metrics", timeout=10).text
        idle = "labkit_requests_running 0.0" in metrics and "labkit_kv_blocks_used 0.0" in metrics
        if idle or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert "labkit_requests_running 0.0" in metrics and "labkit_kv_blocks_used 0.0" in metrics


def broken_app() -> FastAPI:
    """/api/show described as labkit describes it, but answering a body that breaks the schema with 500 and one
    that fits it with a 404 in the wrong shape."""
    app = FastAPI()

    @app.post("/api/show", openapi_extra=request_body(ShowRequest))
    async def show(request: Request) -> JSONResponse:
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return JSONResponse({"error": "boom"}, status_code=500)
        return JSONResponse({"detail": "no such model"}, status_code=404)

    app.openapi = lambda: describe(app, [ShowRequest])
    return app


@pytest.mark.parametrize("status", [500, 404])
def test_a_broken_route_fails_the_same_checks(status):
    app = broken_app()
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    mode_of = {500: GenerationMode.NEGATIVE, 404: GenerationMode.POSITIVE}
    operation = schema["/api/show"]["POST"]

    @given(case=operation.as_strategy(generation_mode=mode_of[status]))
    @settings(
        max_examples=30,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case):
        response = case.call()
        if response.status_code == status:
            case.validate_response(response, checks=CHECKS)

    with pytest.raises(BaseException) as caught:  # schemathesis's FailureGroup is an exception group
        run()
    found = [caught.value, *getattr(caught.value, "exceptions", ())]
    assert any(
        ("Server error" if status == 500 else "protocol_error_shape") in repr(error) for error in found
    ), found
