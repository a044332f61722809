"""One streamed request seen from the client: every frame parsed and timed (notebook 11).

A plain `httpx.AsyncClient` sends the request and notes when each frame arrives, so the figures are
what a user of the server feels, HTTP and all. Both protocols are read the way their official clients
read them: OpenAI's SSE (`data: <json>` events, `:` comments skipped, `data: [DONE]` ends it) and
Ollama's NDJSON (one JSON object per line).

- **TTFT**: request sent -> first frame that carries text. A role-only first chunk (OpenAI's, sent
  before the prompt is even prefilled) is timed separately as `first_frame_s`.
- **TPOT**: `(E2E - TTFT) / (output_tokens - 1)`, as vLLM's benchmark defines it, with the server's
  token count (usage chunk, or Ollama's `eval_count`).
- **E2E**: request sent -> last frame that carries text.

    >>> async with httpx.AsyncClient(base_url=server.url, timeout=300) as http:
    ...     timing = await stream_openai(http, "smollm2-135m", [{"role": "user", "content": "Hi"}], max_tokens=8)
    >>> timing.ttft_s, timing.tpot_s
    (0.21, 0.071)
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field

import httpx

from labkit.core.arguments import check_int, check_text
from labkit.core.doors import check_items, check_number, check_record
from labkit.metrics import time_per_output_token as client_tpot  # the client's TPOT, under its older name
from labkit.run_log import record_result

DONE = "[DONE]"


@dataclass(frozen=True)
class StreamTiming:
    """One streamed request as its client saw it. Times in seconds from the moment it was sent."""

    text: str  # the whole answer
    output_tokens: int  # the server's count (usage chunk or eval_count); else the frames that carried text
    sent_s: float  # time.perf_counter() when the request was sent
    first_frame_s: float  # -> first frame of any kind (nan if none)
    ttft_s: float  # -> first frame with text (nan if none)
    e2e_s: float  # -> last frame with text (nan if none)
    status: int = 200  # the HTTP status
    error: str | None = None  # the error the server sent, if any
    engine: dict = field(default_factory=dict)  # the engine's own counts: Ollama's final chunk, or `timings`

    @property
    def tpot_s(self) -> float:
        """Mean time per output token after the first (nan for fewer than 2 tokens)."""
        return client_tpot(self.ttft_s, self.e2e_s, self.output_tokens)


def sse_payload(line: str) -> str | None:
    """The data of one SSE line (None for comments, blank lines and other fields).

    >>> sse_payload('data: {"a": 1}'), sse_payload(": ping"), sse_payload("data:[DONE]")
    ('{"a": 1}', None, '[DONE]')
    """
    if not line.startswith("data:"):
        return None
    return line[len("data:") :].removeprefix(" ")


def parse_sse(raw: str) -> list[dict]:
    """Every JSON event of an SSE body, up to `data: [DONE]`, as the openai client reads them.

    >>> parse_sse('data: {"x": 1}\\n\\n: ping\\n\\ndata: [DONE]\\n\\n')
    [{'x': 1}]
    """
    events = []
    for line in raw.splitlines():
        payload = sse_payload(line)
        if payload is None:
            continue
        if payload.startswith(DONE):
            break
        events.append(json.loads(payload))
    return events


class FrameClock:
    """Collects text frames and when they arrived, relative to when the request was sent.

    >>> clock = FrameClock(); clock.frame(""); clock.frame("Hi")    # a role-only frame, then text
    >>> clock.timing(output_tokens=1).text
    'Hi'
    """

    def __init__(self) -> None:
        self.sent = time.perf_counter()
        self.first_frame = self.first_text = self.last_text = math.nan
        self.pieces: list[str] = []

    def frame(self, text: str) -> None:
        now = time.perf_counter() - self.sent
        if math.isnan(self.first_frame):
            self.first_frame = now
        if text:
            if math.isnan(self.first_text):
                self.first_text = now
            self.last_text = now
            self.pieces.append(text)

    def timing(
        self,
        output_tokens: int | None,
        status: int = 200,
        error: str | None = None,
        engine: dict | None = None,
    ) -> StreamTiming:
        tokens = len(self.pieces) if output_tokens is None else output_tokens
        # a measured stream: a checker finds it in the run log
        return record_result(
            StreamTiming(
                "".join(self.pieces),
                tokens,
                self.sent,
                self.first_frame,
                self.first_text,
                self.last_text,
                status,
                error,
                engine or {},
            )
        )


async def refused(response: httpx.Response, clock: FrameClock) -> StreamTiming:
    """The timing of a request the server answered with an error status (its message in `error`)."""
    body = (await response.aread()).decode(errors="replace")
    try:
        error = json.loads(body).get("error", body)
    except (json.JSONDecodeError, AttributeError):
        error = body
    message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
    return clock.timing(0, response.status_code, message)


def check_chat_request(
    http: object, model: object, messages: object, max_tokens: object, temperature: object
):
    """Refuse, by name, a request the stream functions cannot send (before anything is sent)."""
    check_record("http", http, "an httpx.AsyncClient with the server's base_url", of=httpx.AsyncClient)
    check_text("model", model, example="'smollm2-135m'")
    check_items("messages", messages, "chat messages ({'role': ..., 'content': ...})", of=dict)
    check_int("max_tokens", max_tokens, minimum=1)
    check_number("temperature", temperature, minimum=0)


def stream_openai(
    http: httpx.AsyncClient,
    model: str,
    messages: Sequence[dict],
    max_tokens: int,
    temperature: float = 0.0,
    extra_body: dict | None = None,
) -> Coroutine[None, None, StreamTiming]:
    """POST /v1/chat/completions with stream=true and usage; time every SSE event (see the module doc).
    extra_body: fields added to the request, as the openai client's `extra_body` adds them (for example
    {"speculative.n_max": 0}). A `timings` object in any event (llama-server's, and a speculating labkit
    server's) is kept in the result's `engine`. The arguments are checked at the call; await what it returns."""
    check_chat_request(http, model, messages, max_tokens, temperature)
    if extra_body is not None:
        check_record("extra_body", extra_body, "a dict of request fields", of=dict)
    return openai_events(http, model, messages, max_tokens, temperature, extra_body or {})


async def openai_events(
    http: httpx.AsyncClient,
    model: str,
    messages: Sequence[dict],
    max_tokens: int,
    temperature: float,
    extra_body: dict,
) -> StreamTiming:
    """stream_openai's request, sent and timed (its arguments already checked)."""
    body = {
        "model": model,
        "messages": list(messages),
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra_body,
    }
    clock, tokens, error, timings = FrameClock(), None, None, {}
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            return await refused(response, clock)
        async for line in response.aiter_lines():
            payload = sse_payload(line)
            if payload is None:
                continue
            if payload.startswith(DONE):
                break
            event = json.loads(payload)
            if event.get("error"):
                error = (
                    event["error"].get("message", "error") if isinstance(event["error"], dict) else "error"
                )
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
            if isinstance(event.get("timings"), dict):
                timings = event["timings"]
            if event.get("choices"):
                clock.frame("".join(c.get("delta", {}).get("content") or "" for c in event["choices"]))
    return clock.timing(tokens, error=error, engine=timings)


def stream_ollama(
    http: httpx.AsyncClient, model: str, messages: Sequence[dict], max_tokens: int, temperature: float = 0.0
) -> Coroutine[None, None, StreamTiming]:
    """POST /api/chat (NDJSON); time every line; keep the final line's counts and durations in `engine`.
    The arguments are checked at the call; await what it returns.

        >>> timing = await stream_ollama(http, "smollm2-135m", [{"role": "user", "content": "Hi"}], max_tokens=8)
        >>> timing.ttft_s, timing.engine["prompt_eval_duration"] / 1e9    # the client's TTFT, the engine's
        (0.215, 0.209)
    """
    check_chat_request(http, model, messages, max_tokens, temperature)
    return ollama_lines(http, model, messages, max_tokens, temperature)


async def ollama_lines(
    http: httpx.AsyncClient, model: str, messages: Sequence[dict], max_tokens: int, temperature: float
) -> StreamTiming:
    """stream_ollama's request, sent and timed (its arguments already checked)."""
    body = {
        "model": model,
        "messages": list(messages),
        "stream": True,
        "options": {"temperature": temperature, "num_predict": max_tokens},
    }
    clock, final, error = FrameClock(), {}, None
    async with http.stream("POST", "/api/chat", json=body) as response:
        if response.status_code != 200:
            return await refused(response, clock)
        async for line in response.aiter_lines():
            if not line:
                continue
            chunk = json.loads(line)
            error = chunk.get("error", error)
            clock.frame((chunk.get("message") or {}).get("content") or "")
            if chunk.get("done"):
                final = {k: v for k, v in chunk.items() if k not in ("message", "model", "created_at")}
    return clock.timing(final.get("eval_count"), error=error, engine=final)
