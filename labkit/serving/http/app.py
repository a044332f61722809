"""The ASGI app: Ollama's and OpenAI's routes, `/health`, `/metrics`, the API key, and error shapes.

This is the only place the web framework meets labkit: routes translate protocols, the engine thread
does the work. Every error leaves in the shape of the protocol its path belongs to (`errors`), and a
client's mistake is never a 500. Routes parse their bodies themselves, after a size-limited read (413),
with their protocol's pydantic models, so FastAPI's own body validation never runs; GET /openapi.json
describes those models all the same (`openapi`), and, like /health, needs no API key. /health shows the KV
blocks in use and in the pool; for a Gemma3 those of its global layers, and beside them its sliding-window
layers' pool (`kv_window_blocks_used`, `kv_window_blocks_total`).

    >>> app = build_app(service, api_key=None)
    >>> uvicorn.run(app, host="127.0.0.1", port=8000)
"""

from __future__ import annotations

import hmac
import logging

from fastapi import Depends, FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from labkit.serving.admission import EngineLoad
from labkit.serving.http import ollama_api, openai_api
from labkit.serving.http.errors import ClientError, error_response
from labkit.serving.http.model_service import ClientGone, ModelService
from labkit.serving.http.ollama_protocol import ChatRequest, GenerateRequest, ShowRequest
from labkit.serving.http.openai_protocol import ChatCompletionRequest, CompletionRequest
from labkit.serving.http.openapi import describe

log = logging.getLogger("labkit.serving.http")
CLIENT_CLOSED_REQUEST = 499  # nginx's status for "the client went away first" (nobody reads it)
REQUEST_MODELS = (ShowRequest, GenerateRequest, ChatRequest, ChatCompletionRequest, CompletionRequest)


def require_key(api_key: str | None):
    """A dependency that answers 401 unless the request carries `Authorization: Bearer <api_key>`."""

    async def check(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise ClientError(
                401,
                "Missing or wrong API key: send the header 'Authorization: Bearer <key>' "
                "with the key this server was started with.",
                headers={"www-authenticate": "Bearer"},
            )

    return check


async def client_error(request: Request, error: ClientError) -> JSONResponse:
    return error_response(request.url.path, error)


async def http_error(request: Request, error: HTTPException) -> JSONResponse:
    """Unknown paths and wrong methods, in the protocol's error shape."""
    message = {
        404: f"No route {request.url.path}: see GET / (Ollama, /api/*) and GET /v1/models (OpenAI, /v1/*).",
        405: f"{request.method} is not allowed on {request.url.path}.",
    }.get(error.status_code, str(error.detail))
    return error_response(request.url.path, ClientError(error.status_code, message))


async def client_gone(request: Request, error: ClientGone) -> Response:
    return Response(status_code=CLIENT_CLOSED_REQUEST)


async def server_error(request: Request, error: Exception) -> JSONResponse:
    log.exception("unexpected error on %s", request.url.path, exc_info=error)
    return error_response(
        request.url.path, ClientError(500, f"Internal server error: {type(error).__name__}.")
    )


def window_blocks(load: EngineLoad) -> dict[str, int]:
    """/health's counts of a Gemma3's sliding-window layers' pool; nothing for a model without one.

    >>> window_blocks(EngineLoad(2, 0, 2, 40, 0, 64, 0.0, window_blocks_used=6, window_blocks_total=64))
    {'kv_window_blocks_used': 6, 'kv_window_blocks_total': 64}
    """
    if load.window_blocks_total is None:
        return {}
    return {
        "kv_window_blocks_used": load.window_blocks_used,
        "kv_window_blocks_total": load.window_blocks_total,
    }


def build_app(service: ModelService, api_key: str | None = None) -> FastAPI:
    """The app serving `service`; with an api_key, every route but /health needs it."""
    app = FastAPI(title="labkit server", docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    app.state.service = service

    def openapi() -> dict:  # FastAPI's document, with the bodies the routes parse by hand (`openapi`)
        if app.openapi_schema is None:
            app.openapi_schema = describe(app, REQUEST_MODELS, service.names)
        return app.openapi_schema

    app.openapi = openapi
    guard = [Depends(require_key(api_key))]
    app.include_router(ollama_api.router, dependencies=guard)
    app.include_router(openai_api.router, dependencies=guard)
    app.add_exception_handler(ClientError, client_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(ClientGone, client_gone)
    app.add_exception_handler(Exception, server_error)

    @app.get("/health")
    async def health() -> JSONResponse:
        load = service.engine_thread.load
        alive = service.engine_thread.thread.is_alive()
        return JSONResponse(
            {
                "status": "ok" if alive else "engine stopped",
                "model": service.name,
                "decode_step": service.engine_thread.engine.step_description(),
                "running": load.running,
                "waiting": load.waiting,
                "kv_blocks_used": load.blocks_used,
                "kv_blocks_total": load.blocks_total,
                "kv_blocks_cached": load.blocks_cached,
                "prefix_cache_hit_rate": load.prefix_hit_rate,
                **window_blocks(load),
            },
            status_code=200 if alive else 503,
        )

    @app.get("/metrics", dependencies=guard, response_class=PlainTextResponse)
    async def metrics() -> Response:
        return Response(
            service.engine_thread.metrics.render(), media_type=service.engine_thread.metrics.content_type
        )

    return app
