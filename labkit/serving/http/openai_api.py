"""The OpenAI-compatible API (`/v1/*`), as vLLM serves it: SSE streaming, usage, vLLM's sampling extras.

A streamed answer is a series of `data: <json>\\n\\n` events: for each choice a role chunk, a chunk per text
piece, one with `finish_reason` (chunks of the n choices interleave, each naming its `index`), a usage
chunk (`"choices": []`, every choice's tokens counted) when `stream_options.include_usage` is set, then
`data: [DONE]` (`openai_choices` builds every choice). `n` choices are n samples of one prefill, sample i
seeded with seed + i, so a seeded request is reproduced exactly. `logprobs` are the model's raw
log-probabilities (before temperature, penalties, top-k/top-p: vLLM's default), in OpenAI's shapes
(`logprobs.py`). `response_format` {"type": "json_schema", ...} or {"type": "json_object"} constrains the
answer to JSON (labkit.decoding.structured); vLLM's `thinking_token_budget` caps a thinking section
(`openai_protocol`). Chat takes OpenAI's `tools`, `tool_choice` ("none", "auto", "required" or a named
function) and `parallel_tool_calls` (`tool_calls`): as vLLM does for "required" and a named function, a
grammar guarantees a call that parses and fits its tool's parameters (not a wise one); an answer that
reads as calls comes back as message.tool_calls with finish_reason "tool_calls", and, streamed, is held
back and ends with tool_calls deltas (`openai_choices`). /v1/completions refuses tools. Bodies are parsed
by `openai_protocol`'s models; unknown request fields are ignored, as vLLM does; errors are
`{"error": {"message", "type", "param", "code"}}`.

    >>> client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    >>> client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "Hi"}])
    >>> client.completions.create(model="smollm2-135m", prompt="The sea is", n=3, seed=1, logprobs=2)
    >>> client.chat.completions.create(model="smollm2-135m", messages=[...], tools=[WEATHER], tool_choice="required")
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from labkit.decoding.tools import ToolSpec
from labkit.serving.http.errors import ClientError, error_body
from labkit.serving.http.model_info import openai_model_card
from labkit.serving.http.model_service import (
    AcceptedRequest,
    ModelService,
    collect,
    failure,
    read_request,
    service_of,
)
from labkit.serving.http.openai_choices import ChoiceWriter, timings, usage
from labkit.serving.http.openai_protocol import ChatCompletionRequest, CompletionRequest, OpenAIRequest
from labkit.serving.http.openapi import request_body

router = APIRouter(prefix="/v1")


@router.get("/models")
async def models(request: Request) -> JSONResponse:
    return JSONResponse({"object": "list", "data": [openai_model_card(service_of(request))]})


@router.post(
    "/chat/completions", openapi_extra=request_body(ChatCompletionRequest, streams="text/event-stream")
)
async def chat_completions(request: Request):
    arrival_s = time.perf_counter()  # the engine's TTFT counts parsing and the wait for the engine
    service, body = await read_request(request, ChatCompletionRequest)
    prompt_ids = service.chat_ids(
        [message.as_chat() for message in body.messages], "messages", body.tool_spec
    )
    return await answer(request, body, prompt_ids, arrival_s)


@router.post("/completions", openapi_extra=request_body(CompletionRequest, streams="text/event-stream"))
async def completions(request: Request):
    arrival_s = time.perf_counter()
    service, body = await read_request(request, CompletionRequest)
    return await answer(request, body, service.encode(body.prompt, "prompt"), arrival_s)


async def answer(request: Request, body: OpenAIRequest, prompt_ids: list[int], arrival_s: float):
    """Run the request's n samples; one JSON object with n choices, or an SSE stream when `stream` is true."""
    service = service_of(request)
    submitted = await service.submit(service.request_spec(body, prompt_ids, arrival_s))
    chat = isinstance(body, ChatCompletionRequest)
    writer = ChoiceWriter(
        chat,
        service.speller,
        logprobs=body.engine_logprobs is not None,
        tools=body.tool_spec if chat else ToolSpec(),
    )
    ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    base = {
        "id": ident,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": body.model,
    }
    if body.stream:
        frames = sse(
            service,
            submitted,
            request,
            {**base, "object": base["object"] + (".chunk" if chat else "")},
            writer,
            body.stream_options.include_usage,
            service.speculates,
        )
        return StreamingResponse(
            frames, media_type="text/event-stream", headers={"cache-control": "no-cache"}
        )
    samples = await collect(service.events(submitted, request, poll_disconnect=True), submitted.n)
    if error := failure(samples):
        raise error
    completion_tokens = sum(sample.last.metrics.output_tokens for sample in samples)
    extra = {"timings": timings([sample.last.metrics for sample in samples])} if service.speculates else {}
    return JSONResponse(
        {
            **base,
            "choices": [writer.choice(index, sample) for index, sample in enumerate(samples)],
            "usage": usage(submitted.prompt_tokens, completion_tokens),
            **extra,
        }
    )


def frame(data: dict | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


async def sse(
    service: ModelService,
    submitted: AcceptedRequest,
    request: Request,
    base: dict,
    writer: ChoiceWriter,
    include_usage: bool,
    with_timings: bool = False,
) -> AsyncIterator[bytes]:
    """The SSE frames of a streamed answer (see the module doc): each chunk one choice of one sample;
    with_timings: the usage chunk carries llama-server's `timings` too (a speculating server)."""
    extra = {"usage": None} if include_usage else {}
    # each sample's tokens not sent yet (no text yet, or maybe calls)
    waiting = [[] for _ in range(submitted.n)]
    offsets = [0] * submitted.n  # characters of each sample's answer sent so far
    completion_tokens, finished = 0, []
    for index in range(submitted.n if writer.chat else 0):
        yield frame({**base, "choices": [writer.role(index)], **extra})
    async for event in service.events(submitted, request):
        if event.error:
            yield frame(error_body("/v1", ClientError(500, event.error)))
            break
        index = event.index
        if event.finish_reason is None:
            waiting[index].append(event)
            if not event.text or (offsets[index] == 0 and writer.holds(waiting[index])):
                continue
            choices = [writer.delta(index, waiting[index], offsets[index])]
        else:
            completion_tokens += event.metrics.output_tokens
            finished.append(event.metrics)
            choices = writer.last(index, waiting[index], offsets[index], event.finish_reason)
        for choice in choices:
            yield frame({**base, "choices": [choice], **extra})
        offsets[index] += sum(len(token.text) for token in waiting[index])
        waiting[index] = []
    else:
        if include_usage:
            counts = {"usage": usage(submitted.prompt_tokens, completion_tokens)}
            counts.update({"timings": timings(finished)} if with_timings else {})
            yield frame({**base, "choices": [], **counts})
    yield frame("[DONE]")
