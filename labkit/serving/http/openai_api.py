"""The OpenAI-compatible API (`/v1/*`), as vLLM serves it: SSE streaming, usage, vLLM's sampling extras.

A streamed answer is a series of `data: <json>\\n\\n` events: a role chunk, a chunk per text piece, one
with `finish_reason`, a usage chunk (`"choices": []`) when `stream_options.include_usage` is set, then
`data: [DONE]`. `response_format` {"type": "json_schema", ...} or {"type": "json_object"} constrains the
answer to JSON (labkit.decoding.structured). Bodies are parsed by `openai_protocol`'s models; unknown
request fields are ignored, as vLLM does; errors are `{"error": {"message", "type", "param", "code"}}`.

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
from labkit.serving.http.model_info import openai_model_card
from labkit.serving.http.model_service import (ModelService, AcceptedRequest, collect, finish_reason, read_request,
                                               service_of)
from labkit.serving.http.openai_protocol import ChatCompletionRequest, CompletionRequest, OpenAIRequest

router = APIRouter(prefix="/v1")


@router.get("/models")
async def models(request: Request) -> JSONResponse:
    return JSONResponse({"object": "list", "data": [openai_model_card(service_of(request))]})


@router.post("/chat/completions")
async def chat_completions(request: Request):
    arrival_s = time.perf_counter()  # the engine's TTFT counts parsing and the wait for the engine
    service, body = await read_request(request, ChatCompletionRequest)
    prompt_ids = service.chat_ids([message.as_chat() for message in body.messages], "messages")
    return await answer(request, body, prompt_ids, arrival_s)


@router.post("/completions")
async def completions(request: Request):
    arrival_s = time.perf_counter()
    service, body = await read_request(request, CompletionRequest)
    return await answer(request, body, service.encode(body.prompt, "prompt"), arrival_s)


def usage(submitted: AcceptedRequest, completion_tokens: int) -> dict:
    return {"prompt_tokens": submitted.prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": submitted.prompt_tokens + completion_tokens}


async def answer(request: Request, body: OpenAIRequest, prompt_ids: list[int], arrival_s: float):
    """Run the request; one JSON object, or an SSE stream when `stream` is true."""
    service = service_of(request)
    config = body.decoding_config(body.DEFAULT_MAX_TOKENS or service.default_max_tokens(prompt_ids))
    service.check_context(prompt_ids, config.max_new_tokens, body.PROMPT_FIELD, body.limit_field)
    submitted = await service.submit(prompt_ids, config, arrival_s=arrival_s)
    chat = isinstance(body, ChatCompletionRequest)
    ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    base = {"id": ident, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": body.model}
    if body.stream:
        frames = sse(service, submitted, request, {**base, "object": base["object"] + (".chunk" if chat else "")},
                     chat, body.stream_options.include_usage)
        return StreamingResponse(frames, media_type="text/event-stream", headers={"cache-control": "no-cache"})
    text, last = await collect(service.events(submitted, request, poll_disconnect=True))
    if last.error:
        raise ClientError(500, last.error)
    choice = {"index": 0, "finish_reason": finish_reason(last.finish_reason), "logprobs": None}
    choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
    return JSONResponse({**base, "choices": [choice], "usage": usage(submitted, last.metrics.output_tokens)})


def frame(data: dict | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


async def sse(service: ModelService, submitted: AcceptedRequest, request: Request, base: dict, chat: bool,
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
