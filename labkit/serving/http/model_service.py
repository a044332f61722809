"""What both protocols share: the model's names, prompts as token ids, options as a DecodingConfig,
and a request's tokens as an async stream that aborts the request when its client goes away.

A request may ask for n samples of its prompt (OpenAI's `n`; at most the engine's seats, since they run
together) and for each token's log-probability: its events then interleave the samples' tokens, each
marked with its sample's index, and `collect` gathers them into one `Sample` per index.

    >>> service = ModelService("smollm2-135m", model, tokenizer, EngineThread(engine))
    >>> service.check_model("smollm2-135m:latest")            # a 404 ClientError for any other name
    >>> ids = service.chat_ids([{"role": "user", "content": "Hi"}], "messages")
    >>> submitted = await service.submit(RequestSpec(ids, DecodingConfig(max_new_tokens=8), arrival_s=t0))
    >>> async for event in service.events(submitted, request):
    ...     print(event.text, end="")
    >>> submitted = await service.submit(RequestSpec(ids, DecodingConfig(max_new_tokens=8, seed=1), n=3, logprobs=2))
    >>> [sample.text for sample in await collect(service.events(submitted, request), submitted.n)]
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TypeVar

import torch
from starlette.requests import Request
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import InvalidArgument
from labkit.core.forward import context_length
from labkit.core.text import chat_prompt, encode_prompt
from labkit.decoding.config import DEFAULT_CONFIG, DecodingConfig
from labkit.decoding.config_checks import SAMPLING_ONLY
from labkit.decoding.option_rules import check_option
from labkit.decoding.tool_prompt import tool_chat_prompt
from labkit.decoding.tools import ToolSpec
from labkit.serving.admission import EngineBusy
from labkit.serving.capacity import DEFAULT_TOKENS_PER_SEQ
from labkit.serving.http.engine_thread import EngineThread, TokenEvent
from labkit.serving.http.errors import ClientError
from labkit.serving.http.fields import ModelRequest, PromptRequest, parse, read_json_object
from labkit.serving.http.logprobs import TokenSpeller
from labkit.serving.request_spec import RequestSpec

DISCONNECT_POLL_S = 0.5  # a non-streaming request checks this often whether its client is still there
MAX_BODY_BYTES = 1_000_000  # larger request bodies get 413
Requested = TypeVar("Requested", bound=ModelRequest)


class ClientGone(Exception):
    """The client of a non-streaming request closed its connection."""


@dataclass(frozen=True)
class AcceptedRequest:
    """A request the engine accepted: its id, the queue of its TokenEvents, its prompt's length, its samples."""

    request_id: int
    events: asyncio.Queue
    prompt_tokens: int
    n: int = 1


@dataclass
class Sample:
    """One sample of a request, read whole: its token events (text piece, logprob) and its last event."""

    tokens: list[TokenEvent]
    last: TokenEvent | None  # finish reason, metrics, or error; None until it arrives

    @property
    def text(self) -> str:
        return "".join(event.text for event in self.tokens)


class ModelService:
    """The one model a server serves, and the engine thread that runs it."""

    def __init__(
        self,
        name: str,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        engine_thread: EngineThread,
        max_body_bytes: int = MAX_BODY_BYTES,
    ):
        self.name = name
        self.model = model
        self.tokenizer = tokenizer
        self.engine_thread = engine_thread
        self.context = context_length(model)
        self.speller = TokenSpeller(tokenizer)  # token ids as log-probabilities show them
        self.max_body_bytes = max_body_bytes
        self.started = time.time()

    @property
    def names(self) -> tuple[str, str]:
        """The names a client may use: labkit's and Ollama's `name:latest`."""
        return self.name, f"{self.name}:latest"

    def check_model(self, requested: str) -> None:
        """A 404 unless `requested` names this server's model."""
        if requested not in self.names:
            raise ClientError(
                404,
                f"model '{requested}' not found: this server serves '{self.name}' "
                f"(also '{self.name}:latest').",
                "model",
            )

    def chat_ids(self, messages: list[dict], param: str, tools: ToolSpec | None = None) -> list[int]:
        """Token ids of a chat through the model's chat template (400 naming `param` if it is malformed).
        With `tools` (a chat route's), the tools offered, the assistant's calls and the tool results are
        rendered too (labkit.decoding.tool_prompt)."""
        try:
            if tools is None:
                return chat_prompt(self.tokenizer, messages)
            return tool_chat_prompt(self.tokenizer, messages, tools)
        except (TypeError, ValueError) as error:
            raise ClientError(400, f"'{param}': {error}", param) from None

    def encode(self, prompt: str | list[int], param: str) -> list[int]:
        """Token ids of plain text, no template, or token ids checked (400 naming `param` if empty or unknown)."""
        try:
            return encode_prompt(self.tokenizer, prompt)
        except (TypeError, ValueError) as error:
            raise ClientError(400, f"'{param}': {error}", param) from None

    def default_max_tokens(self, prompt_ids: list[int]) -> int:
        """New tokens when the client sets no limit: up to the context, at most DEFAULT_TOKENS_PER_SEQ in all."""
        return max(1, min(self.context, DEFAULT_TOKENS_PER_SEQ) - len(prompt_ids))

    @property
    def speculates(self) -> bool:
        """Whether the engine drafts (speculative decoding): its answers then carry llama-server's `timings`."""
        return self.engine_thread.engine.speculator is not None

    def request_spec(self, body: PromptRequest, prompt_ids: list[int], arrival_s: float) -> RequestSpec:
        """The one object a route hands the engine: the body's options as a DecodingConfig (its own default
        limit, else `default_max_tokens`), its samples and log-probabilities, the arrival time and the
        body's names for what the engine may refuse.

            >>> service.request_spec(body, ids, arrival_s=time.perf_counter()).n
            3
        """
        limit = body.DEFAULT_MAX_TOKENS or self.default_max_tokens(prompt_ids)
        return RequestSpec(
            prompt_ids,
            body.decoding_config(limit),
            n=body.samples,
            logprobs=body.engine_logprobs,
            arrival_s=arrival_s,
            fields=body.engine_fields,
            max_draft=body.max_draft,
        )

    async def submit(self, spec: RequestSpec) -> AcceptedRequest:
        """Queue the request `spec` (built by the route: its prompt ids, options, samples, log-probabilities,
        arrival time and the client's field names) in the engine: 503 when the queue is full, 400 when the
        engine refuses it, naming the client's field for the argument the engine names (`spec.fields` maps
        the engine's names, such as "n", "prompt" and "max_new_tokens", to the client's)."""
        try:
            request_id, events = await self.engine_thread.submit(spec)
        except EngineBusy as error:
            raise ClientError(503, str(error), headers={"retry-after": "1"}) from None
        except InvalidArgument as error:
            raise refused_option(error, spec.fields) from None
        except (TypeError, ValueError) as error:
            raise ClientError(400, str(error)) from None
        submitted = AcceptedRequest(request_id, events, len(spec.prompt), spec.n)
        # Whoever drops the request without reading it to the end (a client gone before its first token
        # was read, a handler that failed) aborts it; for a finished request the abort is ignored.
        weakref.finalize(submitted, self.engine_thread.abort, request_id)
        return submitted

    async def events(
        self, submitted: AcceptedRequest, request: Request, poll_disconnect: bool = False
    ) -> AsyncIterator[TokenEvent]:
        """Each TokenEvent of a submitted request, until each of its samples has sent its last event (the
        one with a finish_reason).

        If the consumer stops early (a streaming client disconnected and its response was cancelled)
        or, with poll_disconnect, the client is found gone, the request is aborted and its KV blocks freed.
        """
        unfinished, next_check = submitted.n, time.monotonic() + DISCONNECT_POLL_S
        try:
            while unfinished:
                if poll_disconnect and time.monotonic() >= next_check:
                    if await request.is_disconnected():
                        raise ClientGone()
                    next_check = time.monotonic() + DISCONNECT_POLL_S
                event = await self._next_event(submitted.events, poll_disconnect)
                if event is None:
                    continue
                unfinished -= event.finish_reason is not None
                yield event
        finally:
            if unfinished:
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


async def read_request(request: Request, kind: type[Requested]) -> tuple[ModelService, Requested]:
    """The app's ModelService and the body parsed as a `kind` (400 naming a bad field, 413 if too large),
    its `model` checked (404 if it is not this server's).

        >>> service, body = await read_request(request, ChatRequest)
    """
    service = service_of(request)
    body = parse(kind, await read_json_object(request, service.max_body_bytes))
    service.check_model(body.model)
    return service, body


def decoding_config(chosen: dict[str, tuple[str, object]]) -> DecodingConfig:
    """A DecodingConfig, built once, from DecodingConfig field -> (the client's name for it, value); a 400 names
    the client's field (`refused_option`). Greedy decoding (temperature 0) ignores the sampling-only options
    after checking their values, as Ollama and vLLM do.

        >>> decoding_config({"temperature": ("options.temperature", 0.0), "top_k": ("options.top_k", -1)})
        ClientError: 'options.top_k' must be an integer >= 0 (0 turns it off), got -1.
    """
    options = {field: value for field, (_, value) in chosen.items()}
    try:
        if options.get("temperature", DEFAULT_CONFIG.temperature) == 0:
            for field in SAMPLING_ONLY:
                if field in options:
                    check_option(field, options.pop(field))
        return DecodingConfig(**options)
    except InvalidArgument as error:
        raise refused_option(error, {field: name for field, (name, _) in chosen.items()}) from None


def refused_option(error: InvalidArgument, names: dict[str, str]) -> ClientError:
    """The 400 for an option labkit refused, naming the client's field: `names` maps DecodingConfig's
    option (the error's `parameter`) to it. The one place where labkit's option names become the client's.

        >>> refused_option(InvalidArgument("top_p must be in (0, 1], got 2.", "top_p", 2), {"top_p": "options.top_p"})
        ClientError(400, "'options.top_p' must be in (0, 1], got 2.", param="options.top_p")
    """
    name = names.get(error.parameter)
    return ClientError(400, str(error)) if name is None else ClientError(400, error.called(f"'{name}'"), name)


def finish_reason(engine_reason: str | None) -> str:
    """The engine's reason as both protocols say it: 'stop' (EOS or a stop string) or 'length'."""
    return "length" if engine_reason == "length" else "stop"


async def collect(events: AsyncIterator[TokenEvent], n: int = 1) -> list[Sample]:
    """The n samples of a request, read whole, in index order."""
    samples = [Sample([], None) for _ in range(n)]
    async for event in events:
        sample = samples[event.index]
        if event.finish_reason is None:
            sample.tokens.append(event)
        else:
            sample.last = event
    return samples


def failure(samples: list[Sample]) -> ClientError | None:
    """The 500 to answer when a sample ended with the server's error; None when every sample ended well."""
    message = next((sample.last.error for sample in samples if sample.last.error), None)
    return None if message is None else ClientError(500, message)
