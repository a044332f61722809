"""The server's OpenAPI document (GET /openapi.json): every route, the request model it really parses,
what its answers look like, and its protocol's error shape.

The routes read their bodies by hand (a size-limited read, then their protocol's pydantic model, so that
every refusal is a 400 in the protocol's shape), so FastAPI sees no body parameter and would describe none.
Each POST route declares its model with `request_body` instead, and `describe` puts the models' JSON
schemas beside FastAPI's own document, so a client generator or a fuzzer (schemathesis, in
tests/serving/http/test_fuzz.py) reads the same fields, types, required ones and ranges the server checks
(the ranges and null-as-absent are stated by `json_schema`).
Every operation also declares its errors, as a `default` response in its protocol's shape:

- Ollama (`/api/*`, `/`, `/health`, `/metrics`): `{"error": "<message>"}`
- OpenAI (`/v1/*`): `{"error": {"message", "type", "param", "code"}}`

    >>> @router.post("/api/chat", openapi_extra=request_body(ChatRequest, streams="application/x-ndjson"))
    >>> describe(app, [ChatRequest], served=service.names)["components"]["schemas"]["ChatRequest"]["required"]
    ['model', 'messages']
"""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from labkit.serving.http.errors import is_openai_path

REF = "#/components/schemas/{model}"
OLLAMA_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
OPENAI_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": "integer"},
            },
        }
    },
}
ANSWER = {"type": "object"}  # a JSON answer: its fields are the protocol's (see each route's module)


# One server-sent event as a client parses it (OpenAPI 3.2 names this an event stream's item schema; a fuzzer
# that reads the stream checks each event against it): its `data` (a JSON chunk, or [DONE]) and its fields.
SSE_EVENT = {
    "type": "object",
    "properties": {
        "data": {"type": "string"},
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
    "required": ["data"],
}


def request_body(kind: type[BaseModel], streams: str | None = None) -> dict:
    """A route's `openapi_extra`: its body is a `kind` (JSON), and it answers in JSON or, when the body asks
    to stream, in the `streams` media type (Ollama's NDJSON, OpenAI's server-sent events).

        >>> request_body(ShowRequest)["requestBody"]["content"]["application/json"]["schema"]
        {'$ref': '#/components/schemas/ShowRequest'}
    """
    answers = {"application/json": {"schema": ANSWER}}
    if streams is not None:
        answers[streams] = {"schema": SSE_EVENT if streams == "text/event-stream" else {"type": "string"}}
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": REF.format(model=kind.__name__)}}},
        },
        "responses": {"200": {"description": "The answer, whole or streamed", "content": answers}},
    }


def describe(app: FastAPI, models: Iterable[type[BaseModel]], served: Iterable[str] = ()) -> dict:
    """FastAPI's document of `app`, with the JSON schema of each request model (the bodies `request_body`
    names), its `model` one of the `served` names when given (any other is a 404), and every operation's
    errors in its protocol's shape."""
    document = get_openapi(
        title=app.title,
        version=app.version,
        routes=app.routes,
        description="labkit's server: Ollama's API (/api/*) and OpenAI's (/v1/*).",
    )
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for kind in models:
        schema = kind.model_json_schema(ref_template=REF)
        schemas.update(schema.pop("$defs", {}))
        if served and "model" in schema["properties"]:
            schema["properties"]["model"]["enum"] = list(served)
        schemas[kind.__name__] = schema
    for path, operations in document["paths"].items():
        error = OPENAI_ERROR if is_openai_path(path) else OLLAMA_ERROR
        for operation in operations.values():
            operation["responses"]["default"] = {
                "description": "A refusal (4xx) or the server's fault (5xx)",
                "content": {"application/json": {"schema": error}},
            }
    return document
