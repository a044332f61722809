"""Ollama's native API (`/api/*`): NDJSON streaming, options, durations in nanoseconds.

A streamed answer is one JSON object per line, each flushed as it is made; the last has `done: true`,
`done_reason` ("stop" or "length") and the stats. `format` ("json" or a JSON schema) constrains the answer
to JSON (labkit.decoding.structured). With `logprobs: true` (and `top_logprobs: k`), each chunk carries the
`logprobs` of its tokens, [{"token", "logprob", "bytes", "top_logprobs": [...]}], the model's raw
log-probabilities (`logprobs.py`); the installed `ollama` client (0.6.3) parses them. Ollama has no `n`.
/api/chat's `tools` act as OpenAI's with tool_choice "auto" (`tool_calls`): an answer that reads as calls
has them as message.tool_calls, [{"id", "function": {"index", "name", "arguments": {...}}}], arguments as
an object, content "" and done_reason "stop", as Ollama answers; streamed, such an answer is held back and
its calls come in the last chunk. /api/show lists the "tools" capability for a model with a chat template.
Bodies are parsed by `ollama_protocol`'s models. Errors are `{"error": "..."}` with their status, or, once
a stream has begun, a last line `{"error": "..."}`.

    >>> ollama.Client(host=server.url).generate(model="smollm2-135m", prompt="Hi", options={"num_predict": 8})
    GenerateResponse(model='smollm2-135m', response='Hello! How can I help you today?', done=True, ...)
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse

from labkit.decoding.tools import ToolSpec
from labkit.serving.http.engine_thread import TokenEvent
from labkit.serving.http.logprobs import TokenSpeller, ollama_logprobs
from labkit.serving.http.model_info import model_details, ollama_model_info
from labkit.serving.http.model_service import (
    AcceptedRequest,
    ModelService,
    collect,
    failure,
    finish_reason,
    read_request,
    service_of,
)
from labkit.serving.http.ollama_protocol import ChatRequest, GenerateRequest, GenerationRequest, ShowRequest
from labkit.serving.http.openapi import request_body
from labkit.serving.http.tool_calls import may_be_calls, ollama_call, openai_messages
from labkit.serving.request import EngineRequestMetrics

router = APIRouter()


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def labkit_version() -> str:
    try:
        return version("labkit")
    except PackageNotFoundError:
        return "0.0.0"


@router.get("/", response_class=PlainTextResponse)
@router.head("/", response_class=PlainTextResponse)
async def root() -> PlainTextResponse:
    return PlainTextResponse("Ollama is running")


@router.get("/api/version")
@router.head("/api/version")
async def api_version() -> JSONResponse:
    return JSONResponse({"version": labkit_version()})


@router.get("/api/tags")
async def tags(request: Request) -> JSONResponse:
    service = service_of(request)
    return JSONResponse({"models": [model_details(service, now())]})


@router.get("/api/ps")
async def running_models(request: Request) -> JSONResponse:
    service = service_of(request)
    entry = {
        **model_details(service, now()),
        "expires_at": "9999-12-31T23:59:59Z",
        "size_vram": 0,
        "context_length": service.context,
    }
    return JSONResponse({"models": [entry]})


@router.post("/api/show", openapi_extra=request_body(ShowRequest))
async def show(request: Request) -> JSONResponse:
    service, _ = await read_request(request, ShowRequest)
    details = model_details(service, now())
    template = getattr(service.tokenizer, "chat_template", None) or ""
    return JSONResponse(
        {
            "modelfile": f"FROM {service.name}\n",
            "parameters": "",
            "template": template,
            "details": details["details"],
            "model_info": ollama_model_info(service),
            "capabilities": ["completion", "tools"] if template else ["completion"],
            "modified_at": details["modified_at"],
        }
    )


def nanoseconds(seconds: float) -> int:
    return 0 if math.isnan(seconds) else int(round(seconds * 1e9))


def stats(metrics: EngineRequestMetrics | None) -> dict:
    """Ollama's final-chunk counts and durations (integers, nanoseconds) from the engine's metrics.

    prompt_eval_duration is the time to the first token, queue included (the engine's TTFT).
    """
    if metrics is None:
        return {}
    return {
        "total_duration": nanoseconds(metrics.e2e_s),
        "load_duration": 0,
        "prompt_eval_count": metrics.prompt_tokens,
        "prompt_eval_duration": nanoseconds(metrics.ttft_s),
        "eval_count": metrics.output_tokens,
        "eval_duration": nanoseconds(metrics.e2e_s - metrics.ttft_s),
    }


@dataclass(frozen=True)
class ChunkWriter:
    """ONE place that builds an answer's chunks: /api/chat's carry a message, /api/generate's a response."""

    model: str  # the name the client used
    chat: bool
    speller: TokenSpeller | None  # None: the request did not ask for log-probabilities
    tools: ToolSpec = ToolSpec()  # /api/chat's tools: answers are read back as calls (none: text only)

    def holds(self, tokens: Sequence[TokenEvent]) -> bool:
        """Whether an answer of these tokens (none sent yet) may still become calls: then it waits."""
        return may_be_calls(self.tools, "".join(event.text for event in tokens))

    def chunk(
        self, tokens: Sequence[TokenEvent], last: TokenEvent | None = None, whole: bool = False
    ) -> dict:
        """The chunk of these tokens (their text, and their logprobs when asked for); with `last`, the final
        chunk: done, its reason and the stats. whole: the tokens are the whole answer, read back as calls
        when they are (message.tool_calls, arguments as objects; content the text outside them, or "")."""
        text = "".join(event.text for event in tokens)
        content, calls = self.tools.parse(text) if whole else (text, [])
        message = {
            "role": "assistant",
            "content": content or "",
            **({"tool_calls": [ollama_call(i, call) for i, call in enumerate(calls)]} if calls else {}),
        }
        line = {
            "model": self.model,
            "created_at": now(),
            **({"message": message} if self.chat else {"response": text}),
            "done": last is not None,
        }
        if self.speller is not None and tokens:
            line["logprobs"] = ollama_logprobs(self.speller, [event.logprob for event in tokens])
        if last is not None:
            line.update(done_reason=finish_reason(last.finish_reason), **stats(last.metrics))
        return line


async def answer(
    request: Request, body: GenerationRequest, prompt_ids: list[int], arrival_s: float
) -> JSONResponse | StreamingResponse:
    """Run the request and answer in NDJSON (stream, Ollama's default) or as one JSON object."""
    service = service_of(request)
    submitted = await service.submit(service.request_spec(body, prompt_ids, arrival_s))
    chat = isinstance(body, ChatRequest)
    writer = ChunkWriter(
        body.model,
        chat,
        None if body.engine_logprobs is None else service.speller,
        body.tool_spec if chat else ToolSpec(),
    )
    if not body.stream:
        [sample] = await collect(service.events(submitted, request, poll_disconnect=True))
        if error := failure([sample]):
            raise error
        return JSONResponse(writer.chunk(sample.tokens, sample.last, whole=True))
    return StreamingResponse(ndjson(service, submitted, request, writer), media_type="application/x-ndjson")


async def ndjson(
    service: ModelService, submitted: AcceptedRequest, request: Request, writer: ChunkWriter
) -> AsyncIterator[bytes]:
    """One JSON object per line: a chunk per text piece (a token without text of its own yet waits for the
    next, and an answer that may still become tool calls waits for its end), then the final one (or an
    error line)."""
    waiting, sent = [], False
    async for event in service.events(submitted, request):
        if event.error:
            line = {"error": event.error}
        elif event.finish_reason is not None:
            line = writer.chunk(waiting, last=event, whole=not sent)
        else:
            waiting.append(event)
            if not event.text or (not sent and writer.holds(waiting)):
                continue
            line, sent = writer.chunk(waiting), True
        waiting = []
        yield (json.dumps(line) + "\n").encode()


@router.post("/api/generate", openapi_extra=request_body(GenerateRequest, streams="application/x-ndjson"))
async def generate(request: Request):
    arrival_s = time.perf_counter()  # the engine's TTFT counts parsing and the wait for the engine
    service, body = await read_request(request, GenerateRequest)
    if not body.prompt:  # Ollama: an empty prompt just loads the model
        return JSONResponse(
            {"model": body.model, "created_at": now(), "response": "", "done": True, "done_reason": "load"}
        )
    prompt_ids = (
        service.encode(body.prompt, "prompt") if body.raw else service.chat_ids(body.chat(), "prompt")
    )
    return await answer(request, body, prompt_ids, arrival_s)


@router.post("/api/chat", openapi_extra=request_body(ChatRequest, streams="application/x-ndjson"))
async def chat(request: Request):
    arrival_s = time.perf_counter()
    service, body = await read_request(request, ChatRequest)
    messages = openai_messages([message.as_chat() for message in body.messages])
    prompt_ids = service.chat_ids(messages, "messages", body.tool_spec)
    return await answer(request, body, prompt_ids, arrival_s)
