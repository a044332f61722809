"""Ollama's native API (`/api/*`): NDJSON streaming, options, durations in nanoseconds.

A streamed answer is one JSON object per line, each flushed as it is made; the last has `done: true`,
`done_reason` ("stop" or "length") and the stats. `format` ("json" or a JSON schema) constrains the answer
to JSON (labkit.decoding.structured). Errors are `{"error": "..."}` with their status, or,
once a stream has begun, a last line `{"error": "..."}`.

    >>> ollama.Client(host=server.url).generate(model="smollm2-135m", prompt="Hi", options={"num_predict": 8})
    GenerateResponse(model='smollm2-135m', response='Hello! How can I help you today?', done=True, ...)
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse

from labkit.serving.http.errors import ClientError
from labkit.serving.http.fields import (ARRAY, BOOLEAN, INTEGER, NUMBER, OBJECT, STRING, STRINGS, Kind,
                                        refuse_unsupported, take)
from labkit.serving.http.model_info import model_details, ollama_model_info
from labkit.serving.http.model_service import (ModelService, Submitted, collect, finish_reason,
                                               read_model_request, service_of)
from labkit.serving.request import EngineRequestMetrics

router = APIRouter()

# Ollama option -> (DecodingConfig field, JSON kind). Ollama's defaults apply when an option is absent.
OPTIONS = {
    "temperature": ("temperature", NUMBER), "top_k": ("top_k", INTEGER), "top_p": ("top_p", NUMBER),
    "min_p": ("min_p", NUMBER), "typical_p": ("typical_p", NUMBER),
    "repeat_penalty": ("repetition_penalty", NUMBER), "presence_penalty": ("presence_penalty", NUMBER),
    "frequency_penalty": ("frequency_penalty", NUMBER), "seed": ("seed", INTEGER),
    "num_predict": ("max_new_tokens", INTEGER), "stop": ("stop", STRINGS),
}
DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.9}  # Ollama's DefaultOptions (api/types.go)
# Load-time options: labkit sizes the model and its cache itself, so these change nothing and are accepted.
LOAD_OPTIONS = {"num_ctx", "num_batch", "num_gpu", "main_gpu", "use_mmap", "use_mlock", "num_thread", "num_keep",
                "low_vram", "vocab_only", "numa"}
UNSUPPORTED = {"logprobs": "log-probabilities are not returned by labkit's server.",
               "top_logprobs": "log-probabilities are not returned by labkit's server.",
               "images": "the model reads text only.", "think": "the model has no thinking mode.",
               "tools": "tool calling is not implemented in labkit.", "suffix": "fill-in-the-middle is not "
               "implemented in labkit.", "template": "the model's own chat template is always used.",
               "context": "pass the conversation as /api/chat messages instead."}


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def labkit_version() -> str:
    try:
        return version("labkit")
    except PackageNotFoundError:
        return "0.0.0"


@router.api_route("/", methods=["GET", "HEAD"])
async def root() -> PlainTextResponse:
    return PlainTextResponse("Ollama is running")


@router.api_route("/api/version", methods=["GET", "HEAD"])
async def api_version() -> JSONResponse:
    return JSONResponse({"version": labkit_version()})


@router.get("/api/tags")
async def tags(request: Request) -> JSONResponse:
    service = service_of(request)
    return JSONResponse({"models": [model_details(service, now())]})


@router.get("/api/ps")
async def running_models(request: Request) -> JSONResponse:
    service = service_of(request)
    entry = {**model_details(service, now()), "expires_at": "9999-12-31T23:59:59Z", "size_vram": 0,
             "context_length": service.context}
    return JSONResponse({"models": [entry]})


@router.post("/api/show")
async def show(request: Request) -> JSONResponse:
    service, body = await read_model_request(request)
    details = model_details(service, now())
    template = getattr(service.tokenizer, "chat_template", None) or ""
    return JSONResponse({"modelfile": f"FROM {service.name}\n", "parameters": "", "template": template,
                         "details": details["details"], "model_info": ollama_model_info(service),
                         "capabilities": ["completion"], "modified_at": details["modified_at"]})


def decoding_options(service: ModelService, body: dict, prompt_ids: list[int]):
    """The request's `options` as a DecodingConfig (400 for a bad or unsupported option)."""
    options = take(body, "options", OBJECT, default={})
    chosen = {}
    for name, value in options.items():
        if name in LOAD_OPTIONS or value is None:
            continue
        if name not in OPTIONS:
            raise ClientError(400, f"'options.{name}' is not supported by this server; it takes "
                                   f"{', '.join(OPTIONS)} (and ignores the load-time options).", f"options.{name}")
        field, kind = OPTIONS[name]
        chosen[field] = take(options, name, kind, where="options.")
    for name, value in DEFAULTS.items():
        chosen.setdefault(OPTIONS[name][0], value)
    if isinstance(chosen.get("stop"), str):
        chosen["stop"] = [chosen["stop"]]
    limit = chosen.get("max_new_tokens")
    if limit is not None and limit < -2:
        raise ClientError(400, f"'options.num_predict' must be -1 (no limit), -2 (fill the context) or >= 0, "
                               f"got {limit}.", "options.num_predict")
    if limit is None or limit < 0:
        chosen["max_new_tokens"] = service.default_max_tokens(prompt_ids)
    else:
        service.check_budget(prompt_ids, limit, "options.num_predict")
    schema = format_schema(body)
    if schema is not None:
        chosen["json_schema"] = schema
    names = {field: f"options.{name}" for name, (field, _) in OPTIONS.items()}
    return service.config(chosen, {**names, "json_schema": "format"})


def format_schema(body: dict) -> dict | bool | None:
    """`format` as DecodingConfig's json_schema: None when absent or "", True for "json" (any JSON object),
    or a JSON schema object; a 400 naming the field for anything else."""
    value = take(body, "format", Kind('"json" or a JSON schema object', lambda v: v in ("", "json") or
                                      isinstance(v, dict)))
    if value in (None, ""):
        return None
    return True if value == "json" else value


def nanoseconds(seconds: float) -> int:
    return 0 if math.isnan(seconds) else int(round(seconds * 1e9))


def stats(metrics: EngineRequestMetrics | None) -> dict:
    """Ollama's final-chunk counts and durations (integers, nanoseconds) from the engine's metrics.

    prompt_eval_duration is the time to the first token, queue included (the engine's TTFT).
    """
    if metrics is None:
        return {}
    return {"total_duration": nanoseconds(metrics.e2e_s), "load_duration": 0,
            "prompt_eval_count": metrics.prompt_tokens, "prompt_eval_duration": nanoseconds(metrics.ttft_s),
            "eval_count": metrics.output_tokens, "eval_duration": nanoseconds(metrics.e2e_s - metrics.ttft_s)}


async def answer(request: Request, body: dict, prompt_ids: list[int], piece_key: str) -> JSONResponse | StreamingResponse:
    """Run the request and answer in NDJSON (stream, Ollama's default) or as one JSON object."""
    service = service_of(request)
    stream = take(body, "stream", BOOLEAN, default=True)
    config = decoding_options(service, body, prompt_ids)
    submitted = await service.submit(prompt_ids, config)

    def chunk(text: str, **extra) -> dict:
        content = {"message": {"role": "assistant", "content": text}} if piece_key == "message" else {"response": text}
        return {"model": body["model"], "created_at": now(), **content, **extra}

    if not stream:
        text, last = await collect(service.events(submitted, request, poll_disconnect=True))
        if last.error:
            raise ClientError(500, last.error)
        return JSONResponse(chunk(text, done=True, done_reason=finish_reason(last.finish_reason), **stats(last.metrics)))
    return StreamingResponse(ndjson(service, submitted, request, chunk), media_type="application/x-ndjson")


async def ndjson(service: ModelService, submitted: Submitted, request: Request, chunk) -> AsyncIterator[bytes]:
    """One JSON object per line: a chunk per text piece, then the final one (or an error line)."""
    async for event in service.events(submitted, request):
        if event.error:
            line = {"error": event.error}
        elif event.finish_reason is not None:
            line = chunk("", done=True, done_reason=finish_reason(event.finish_reason), **stats(event.metrics))
        elif event.text:
            line = chunk(event.text, done=False)
        else:
            continue
        yield (json.dumps(line) + "\n").encode()


@router.post("/api/generate")
async def generate(request: Request):
    service, body = await read_model_request(request, {k: v for k, v in UNSUPPORTED.items() if k != "tools"})
    prompt = take(body, "prompt", STRING, default="")
    system = take(body, "system", STRING)
    take(body, "keep_alive", Kind("a duration (string or number)", lambda v: isinstance(v, (str, int, float))))
    if not prompt:  # Ollama: an empty prompt just loads the model
        return JSONResponse({"model": body["model"], "created_at": now(), "response": "", "done": True,
                             "done_reason": "load"})
    if take(body, "raw", BOOLEAN, default=False):
        prompt_ids = service.text_ids(prompt, "prompt")
    else:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        prompt_ids = service.chat_ids(messages, "prompt")
    return await answer(request, body, prompt_ids, "response")


@router.post("/api/chat")
async def chat(request: Request):
    service, body = await read_model_request(request, UNSUPPORTED)
    messages = take(body, "messages", ARRAY, required=True)
    for index, message in enumerate(messages):
        if isinstance(message, dict):
            refuse_unsupported(message, {k: UNSUPPORTED[k] for k in ("images",)}, where=f"messages[{index}].")
    plain = [{"role": m.get("role"), "content": m.get("content")} if isinstance(m, dict) else m for m in messages]
    return await answer(request, body, service.chat_ids(plain, "messages"), "message")
