"""The OpenAI-compatible API (`/v1/*`), as vLLM serves it: SSE streaming, usage, vLLM's sampling extras.

A streamed answer is a series of `data: <json>\\n\\n` events: a role chunk, a chunk per text piece, one
with `finish_reason`, a usage chunk (`"choices": []`) when `stream_options.include_usage` is set, then
`data: [DONE]`. `response_format` {"type": "json_schema", ...} or {"type": "json_object"} constrains the
answer to JSON (labkit.decoding.structured). Unknown request fields are ignored, as vLLM does; errors are
`{"error": {"message", "type", "param", "code"}}`.

    >>> client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    >>> client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "Hi"}])
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from labkit.serving.http.errors import ClientError, error_body
from labkit.serving.http.fields import ARRAY, BOOLEAN, INTEGER, NUMBER, OBJECT, STRING, STRINGS, Kind, take
from labkit.serving.http.model_info import openai_model_card
from labkit.serving.http.model_service import (ModelService, Submitted, collect, finish_reason,
                                               read_model_request, service_of)

router = APIRouter(prefix="/v1")

# Request field -> (DecodingConfig field, JSON kind): OpenAI's, then vLLM's extras.
SAMPLING = {
    "temperature": ("temperature", NUMBER), "top_p": ("top_p", NUMBER), "seed": ("seed", INTEGER),
    "presence_penalty": ("presence_penalty", NUMBER), "frequency_penalty": ("frequency_penalty", NUMBER),
    "stop": ("stop", STRINGS), "top_k": ("top_k", INTEGER), "min_p": ("min_p", NUMBER),
    "repetition_penalty": ("repetition_penalty", NUMBER), "min_tokens": ("min_new_tokens", INTEGER),
}
DEFAULT_TEMPERATURE = 1.0  # OpenAI's and vLLM's default
COMPLETIONS_MAX_TOKENS = 16  # /v1/completions' default max_tokens (OpenAI's legacy default)
UNSUPPORTED = {"logprobs": "log-probabilities are not returned by labkit's server.",
               "top_logprobs": "log-probabilities are not returned by labkit's server.",
               "tools": "tool calling is not implemented in labkit.", "echo": "the prompt is not echoed.",
               "suffix": "fill-in-the-middle is not implemented in labkit.", "use_beam_search": "the engine "
               "samples one sequence per request.", "ignore_eos": "the engine always stops at EOS."}


@router.get("/models")
async def models(request: Request) -> JSONResponse:
    return JSONResponse({"object": "list", "data": [openai_model_card(service_of(request))]})


def sampling_config(service: ModelService, body: dict, prompt_ids: list[int], default_max_tokens: int | None):
    """The request's sampling fields as a DecodingConfig (400 naming the field for a bad value)."""
    chosen = {field: take(body, name, kind) for name, (field, kind) in SAMPLING.items() if body.get(name) is not None}
    chosen.setdefault("temperature", DEFAULT_TEMPERATURE)
    if chosen.get("top_k") == -1:  # vLLM: -1 turns top-k off
        chosen["top_k"] = 0
    if isinstance(chosen.get("stop"), str):
        chosen["stop"] = [chosen["stop"]]
    if take(body, "n", INTEGER, default=1) != 1:
        raise ClientError(400, "'n' must be 1: the engine samples one sequence per request.", "n")
    schema = response_format_schema(body)
    if schema is not None:
        chosen["json_schema"] = schema
    bias = take(body, "logit_bias", OBJECT, default={})
    if bias:
        if not all(key.isdigit() for key in bias):
            raise ClientError(400, "'logit_bias' keys must be token ids (strings of digits).", "logit_bias")
        chosen["logit_bias"] = {int(key): value for key, value in bias.items()}
    limit = take(body, "max_completion_tokens", INTEGER, default=take(body, "max_tokens", INTEGER))
    if limit is not None and limit >= 0:
        service.check_budget(prompt_ids, limit, "max_tokens")
    chosen["max_new_tokens"] = limit if limit is not None else (default_max_tokens or
                                                                service.default_max_tokens(prompt_ids))
    names = {field: name for name, (field, _) in SAMPLING.items()}
    names.update(max_new_tokens="max_tokens", logit_bias="logit_bias",
                 json_schema="response_format.json_schema.schema" if isinstance(schema, dict) else "response_format")
    return service.config(chosen, names)


def response_format_schema(body: dict) -> dict | bool | None:
    """`response_format` as DecodingConfig's json_schema: None for {"type": "text"} (the default), True for
    {"type": "json_object"}, the schema of {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
    (always followed, strict or not); a 400 naming the field for anything else."""
    response_format = take(body, "response_format", OBJECT, default={"type": "text"})
    kind = take(response_format, "type", STRING, default="text", where="response_format.")
    if kind in ("text", "json_object"):
        return None if kind == "text" else True
    if kind != "json_schema":
        raise ClientError(400, "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got "
                               f"{json.dumps(kind)}.", "response_format.type")
    where = "response_format.json_schema."
    spec = take(response_format, "json_schema", OBJECT, required=True, where="response_format.")
    take(spec, "name", STRING, required=True, where=where)
    take(spec, "strict", BOOLEAN, where=where)
    return take(spec, "schema", OBJECT, required=True, where=where)


def message_text(message: object, index: int) -> dict:
    """An OpenAI message as {role, content}: text parts joined, 'developer' read as 'system'."""
    if not isinstance(message, dict):
        raise ClientError(400, f"'messages[{index}]' must be an object with 'role' and 'content'.", "messages")
    content = message.get("content")
    if isinstance(content, list):
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            raise ClientError(400, f"'messages[{index}].content' parts must be {{\"type\": \"text\", \"text\": ...}}: "
                                   "the model reads text only.", "messages")
        content = "".join(part["text"] for part in content)
    role = "system" if message.get("role") == "developer" else message.get("role")
    return {"role": role, "content": content}


@router.post("/chat/completions")
async def chat_completions(request: Request):
    service, body = await read_model_request(request, UNSUPPORTED)
    messages = take(body, "messages", ARRAY, required=True)
    prompt_ids = service.chat_ids([message_text(m, i) for i, m in enumerate(messages)], "messages")
    config = sampling_config(service, body, prompt_ids, None)
    return await answer(request, body, prompt_ids, config, chat=True)


@router.post("/completions")
async def completions(request: Request):
    service, body = await read_model_request(request, UNSUPPORTED)
    prompt = take(body, "prompt", Kind("a string, an array of one string, or an array of token ids",
                                       lambda v: isinstance(v, (str, list))), required=True)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        prompt_ids = service.text_ids(prompt, "prompt")
    elif prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        prompt_ids = service.check_length(list(prompt), "prompt")
    else:
        raise ClientError(400, "'prompt' must be a string, an array of one string, or a non-empty array of "
                               "token ids: one prompt per request.", "prompt")
    config = sampling_config(service, body, prompt_ids, COMPLETIONS_MAX_TOKENS)
    return await answer(request, body, prompt_ids, config, chat=False)


def usage(submitted: Submitted, completion_tokens: int) -> dict:
    return {"prompt_tokens": submitted.prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": submitted.prompt_tokens + completion_tokens}


async def answer(request: Request, body: dict, prompt_ids: list[int], config, chat: bool):
    """Run the request; one JSON object, or an SSE stream when `stream` is true."""
    service = service_of(request)
    stream = take(body, "stream", BOOLEAN, default=False)
    include_usage = take(take(body, "stream_options", OBJECT, default={}), "include_usage", BOOLEAN,
                         default=False, where="stream_options.")
    submitted = await service.submit(prompt_ids, config)
    ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    base = {"id": ident, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": body["model"]}
    if stream:
        frames = sse(service, submitted, request, {**base, "object": base["object"] + (".chunk" if chat else "")},
                     chat, include_usage)
        return StreamingResponse(frames, media_type="text/event-stream", headers={"cache-control": "no-cache"})
    text, last = await collect(service.events(submitted, request, poll_disconnect=True))
    if last.error:
        raise ClientError(500, last.error)
    choice = {"index": 0, "finish_reason": finish_reason(last.finish_reason), "logprobs": None}
    choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
    return JSONResponse({**base, "choices": [choice], "usage": usage(submitted, last.metrics.output_tokens)})


def frame(data: dict | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


async def sse(service: ModelService, submitted: Submitted, request: Request, base: dict, chat: bool,
              include_usage: bool) -> AsyncIterator[bytes]:
    """The SSE frames of a streamed answer (see the module doc)."""
    extra = {"usage": None} if include_usage else {}
    choice: Callable[[str, str | None], dict] = (
        (lambda text, reason: {"index": 0, "delta": {"content": text}, "finish_reason": reason, "logprobs": None})
        if chat else (lambda text, reason: {"index": 0, "text": text, "finish_reason": reason, "logprobs": None}))
    if chat:
        yield frame({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                          "finish_reason": None, "logprobs": None}], **extra})
    async for event in service.events(submitted, request):
        if event.error:
            yield frame(error_body("/v1", ClientError(500, event.error)))
        elif event.finish_reason is not None:
            last = choice("", finish_reason(event.finish_reason))
            if chat:
                last["delta"] = {}
            yield frame({**base, "choices": [last], **extra})
            if include_usage:
                yield frame({**base, "choices": [], "usage": usage(submitted, event.metrics.output_tokens)})
        elif event.text:
            yield frame({**base, "choices": [choice(event.text, None)], **extra})
    yield frame("[DONE]")
