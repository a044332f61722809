"""What both protocols share: the model's names, prompts as token ids, options as a DecodingConfig,
and a request's tokens as an async stream that aborts the request when its client goes away.

    >>> service = ModelService("smollm2-135m", model, tokenizer, EngineThread(engine))
    >>> service.check_model("smollm2-135m:latest")            # a 404 ClientError for any other name
    >>> ids = service.chat_ids([{"role": "user", "content": "Hi"}], "messages")
    >>> submitted = await service.submit(ids, service.config({"max_new_tokens": 8}, {}))
    >>> async for event in service.events(submitted, request):
    ...     print(event.text, end="")
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass

import torch
from starlette.requests import Request
from transformers import PreTrainedTokenizerBase

from labkit.core.forward import context_length
from labkit.core.text import chat_prompt, encode_prompt
from labkit.decoding.config import SAMPLING_ONLY, DecodingConfig
from labkit.serving.engine import DEFAULT_TOKENS_PER_SEQ, EngineBusy
from labkit.serving.http.engine_thread import EngineThread, TokenEvent
from labkit.serving.http.errors import ClientError
from labkit.serving.http.fields import STRING, read_json_object, refuse_unsupported, take

DISCONNECT_POLL_S = 0.5  # a non-streaming request checks this often whether its client is still there
MAX_BODY_BYTES = 1_000_000  # larger request bodies get 413


class ClientGone(Exception):
    """The client of a non-streaming request closed its connection."""


@dataclass(frozen=True)
class Submitted:
    """A request the engine accepted: its id, the queue of its TokenEvents, its prompt's length."""

    request_id: int
    events: asyncio.Queue
    prompt_tokens: int


class ModelService:
    """The one model a server serves, and the engine thread that runs it."""

    def __init__(self, name: str, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
                 engine_thread: EngineThread, max_body_bytes: int = MAX_BODY_BYTES):
        self.name = name
        self.model = model
        self.tokenizer = tokenizer
        self.engine_thread = engine_thread
        self.context = context_length(model)
        self.max_body_bytes = max_body_bytes
        self.started = time.time()

    @property
    def names(self) -> tuple[str, str]:
        """The names a client may use: labkit's and Ollama's `name:latest`."""
        return self.name, f"{self.name}:latest"

    def check_model(self, requested: str) -> None:
        """A 404 unless `requested` names this server's model."""
        if requested not in self.names:
            raise ClientError(404, f"model '{requested}' not found: this server serves '{self.name}' "
                                   f"(also '{self.name}:latest').", "model")

    def chat_ids(self, messages: list[dict], param: str) -> list[int]:
        """Token ids of a chat through the model's chat template (400 naming `param` if it is malformed)."""
        try:
            ids = chat_prompt(self.tokenizer, messages)
        except (TypeError, ValueError) as error:
            raise ClientError(400, f"'{param}': {error}", param) from None
        return self.check_length(ids, param)

    def text_ids(self, text: str, param: str) -> list[int]:
        """Token ids of plain text, no template (400 naming `param` if empty or too long)."""
        try:
            ids = encode_prompt(self.tokenizer, text)
        except (TypeError, ValueError) as error:
            raise ClientError(400, f"'{param}': {error}", param) from None
        return self.check_length(ids, param)

    def check_length(self, ids: list[int], param: str) -> list[int]:
        if len(ids) >= self.context:
            raise ClientError(400, f"'{param}' is {len(ids)} tokens long; the model's context holds {self.context} "
                                   "tokens, including at least one new token. Shorten it.", param)
        return ids

    def check_budget(self, prompt_ids: list[int], max_new_tokens: int, field: str) -> None:
        """A 400 naming `field` when the prompt plus the new tokens asked for exceed the context."""
        room = self.context - len(prompt_ids)
        if max_new_tokens > room:
            raise ClientError(400, f"'{field}' asks for {max_new_tokens} new tokens, but the prompt has "
                                   f"{len(prompt_ids)} and the model's context holds {self.context}: ask for at "
                                   f"most {room}.", field)

    def default_max_tokens(self, prompt_ids: list[int]) -> int:
        """New tokens when the client sets no limit: up to the context, at most DEFAULT_TOKENS_PER_SEQ in all."""
        return max(1, min(self.context, DEFAULT_TOKENS_PER_SEQ) - len(prompt_ids))

    def config(self, options: dict, names: dict[str, str]) -> DecodingConfig:
        """A DecodingConfig from labkit-named options; errors name the client's field (names: labkit -> field).

        Greedy decoding (temperature 0) ignores the sampling-only options, as Ollama and vLLM do, after
        checking their values.
        """
        try:
            DecodingConfig(**{**options, "temperature": 1.0})  # each value checked, whatever the temperature
            if options.get("temperature") == 0:
                options = {k: v for k, v in options.items() if k not in SAMPLING_ONLY}
            return DecodingConfig(**options)
        except (TypeError, ValueError) as error:
            message = str(error)
            name = next((k for k in sorted(names, key=len, reverse=True) if message.startswith(k)), None)
            if name is None:
                raise ClientError(400, message) from None
            raise ClientError(400, f"'{names[name]}'{message[len(name):]}", names[name]) from None

    async def submit(self, prompt_ids: list[int], config: DecodingConfig, arrival_s: float | None = None) -> Submitted:
        """Queue a request in the engine: 503 when the queue is full, 400 when the engine refuses it.

        arrival_s: when the handler received it (time.perf_counter), so that the engine's TTFT counts the
        wait for the step in flight; now by default."""
        try:
            request_id, events = await self.engine_thread.submit(prompt_ids, config, arrival_s)
        except EngineBusy as error:
            raise ClientError(503, str(error), headers={"retry-after": "1"}) from None
        except (TypeError, ValueError) as error:
            raise ClientError(400, str(error)) from None
        submitted = Submitted(request_id, events, len(prompt_ids))
        # Whoever drops the request without reading it to the end (a client gone before its first token
        # was read, a handler that failed) aborts it; for a finished request the abort is ignored.
        weakref.finalize(submitted, self.engine_thread.abort, request_id)
        return submitted

    async def events(self, submitted: Submitted, request: Request,
                     poll_disconnect: bool = False) -> AsyncIterator[TokenEvent]:
        """Each TokenEvent of a submitted request, the last one with its finish_reason.

        If the consumer stops early (a streaming client disconnected and its response was cancelled)
        or, with poll_disconnect, the client is found gone, the request is aborted and its KV blocks freed.
        """
        finished, next_check = False, time.monotonic() + DISCONNECT_POLL_S
        try:
            while not finished:
                if poll_disconnect and time.monotonic() >= next_check:
                    if await request.is_disconnected():
                        raise ClientGone()
                    next_check = time.monotonic() + DISCONNECT_POLL_S
                event = await self._next_event(submitted.events, poll_disconnect)
                if event is None:
                    continue
                finished = event.finish_reason is not None
                yield event
        finally:
            if not finished:
                self.engine_thread.abort(submitted.request_id)

    async def _next_event(self, events: asyncio.Queue, poll_disconnect: bool) -> TokenEvent | None:
        """The next event (None if polling and none came within DISCONNECT_POLL_S)."""
        if not poll_disconnect:
            return await events.get()
        try:
            return await asyncio.wait_for(events.get(), DISCONNECT_POLL_S)
        except asyncio.TimeoutError:
            return None


def service_of(request: Request) -> ModelService:
    """The ModelService of the app that received this request."""
    return request.app.state.service


async def read_model_request(request: Request, unsupported: dict[str, str] | None = None) -> tuple[ModelService, dict]:
    """The app's ModelService and the request's JSON body, its `model` checked (404 if unknown) and any
    field in `unsupported` (name -> why) refused with a 400.

        >>> service, body = await read_model_request(request, {"tools": "tool calling is not implemented."})
    """
    service = service_of(request)
    body = await read_json_object(request, service.max_body_bytes)
    service.check_model(take(body, "model", STRING, required=True))
    refuse_unsupported(body, unsupported or {})
    return service, body


def finish_reason(engine_reason: str | None) -> str:
    """The engine's reason as both protocols say it: 'stop' (EOS or a stop string) or 'length'."""
    return "length" if engine_reason == "length" else "stop"


async def collect(events: AsyncIterator[TokenEvent]) -> tuple[str, TokenEvent]:
    """The whole text of a request and its last event (finish reason, metrics, or error)."""
    pieces = []
    async for event in events:
        pieces.append(event.text)
        last = event
    return "".join(pieces), last
