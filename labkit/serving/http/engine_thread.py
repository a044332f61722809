"""The serving engine in a thread of its own, fed and read by asyncio code without blocking it.

The event loop never touches the `Engine`: it puts commands (add, abort) in a thread-safe inbox and
reads each request's tokens from an `asyncio.Queue` of its own, which the engine thread fills with
`loop.call_soon_threadsafe`. The thread steps while any request is unfinished and sleeps on the inbox
otherwise. An add is answered (request id, or the error) before the next step.

    thread = EngineThread(Engine(model, tokenizer, max_num_seqs=8, max_waiting=64))
    thread.start()
    request_id, events = await thread.submit(prompt_ids, DecodingConfig(max_new_tokens=16), time.perf_counter())
    while (event := await events.get()).finish_reason is None:
        print(event.text, end="")
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

from labkit.decoding.config import DecodingConfig
from labkit.serving.engine import Engine, EngineBusy, EngineLoad
from labkit.serving.http.server_metrics import ServerMetrics
from labkit.serving.request import EngineRequestMetrics

log = logging.getLogger("labkit.serving.http")


@dataclass(frozen=True)
class TokenEvent:
    """One token of a request as it leaves the engine (or the error that ended it)."""

    text: str  # the text this token adds ('' while a character is incomplete)
    token_id: int | None  # None only for an error event
    finish_reason: str | None = None  # "eos", "length", "stop", "abort" or "error" on the last event
    metrics: EngineRequestMetrics | None = None  # on the last event: queue, TTFT, TPOT, counts
    error: str | None = None  # what went wrong inside the server (finish_reason "error")


@dataclass
class EngineHandoff:
    prompt_ids: list[int]
    config: DecodingConfig
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue
    answer: Future  # the request id, or the exception add_request raised
    arrival_s: float  # when the server received it (time.perf_counter), before any wait for the engine


class EngineThread:
    """Owns an Engine; `submit` and `abort` are safe to call from the event loop (see the module doc)."""

    def __init__(self, engine: Engine, metrics: ServerMetrics | None = None):
        if engine.clock is not time.perf_counter:
            raise ValueError("The engine thread stamps arrivals with time.perf_counter: give the engine that clock.")
        self.engine = engine
        self.metrics = metrics or ServerMetrics()
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.streams: dict[int, EngineHandoff] = {}  # unfinished requests, by id (engine thread only)
        self.load: EngineLoad = engine.load()  # as last published: what /health and /api/ps show
        self.thread = threading.Thread(target=self._run, name="labkit-engine", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the thread to end after its current step and wait for it."""
        self.inbox.put(None)
        self.thread.join(timeout)

    async def submit(self, prompt_ids: list[int], config: DecodingConfig,
                     arrival_s: float | None = None) -> tuple[int, asyncio.Queue]:
        """Queue a request that arrived at arrival_s (time.perf_counter; now by default); its id and the
        queue its `TokenEvent`s arrive on.

        Raises EngineBusy when the engine's queue is full, ValueError/TypeError when it refuses the request.
        """
        loop = asyncio.get_running_loop()
        arrival_s = time.perf_counter() if arrival_s is None else arrival_s
        handoff = EngineHandoff(list(prompt_ids), config, loop, asyncio.Queue(), Future(), arrival_s)
        self.inbox.put(handoff)
        request_id = await asyncio.wrap_future(handoff.answer)
        return request_id, handoff.events

    def abort(self, request_id: int) -> None:
        """Stop a request and free its KV blocks (at the engine thread's next turn); safe if it finished."""
        self.inbox.put(request_id)

    def _run(self) -> None:
        while True:
            if not self._handle_commands(block=not self.engine.has_unfinished()):
                return
            if self.engine.has_unfinished():
                self._step()
            self._publish_load()

    def _handle_commands(self, block: bool) -> bool:
        """Apply every queued command (waiting for one if block); False once asked to stop."""
        while True:
            try:
                command = self.inbox.get(block=block)
            except queue.Empty:
                return True
            block = False
            if command is None:
                return False
            if isinstance(command, EngineHandoff):
                self._add(command)
            elif command in self.streams:
                self.engine.abort(command)
                self._finish(command)

    def _add(self, handoff: EngineHandoff) -> None:
        try:
            request_id = self.engine.add_request(handoff.prompt_ids, handoff.config, handoff.arrival_s)
        except EngineBusy as error:
            self.metrics.rejected.inc()
            handoff.answer.set_exception(error)
            return
        except Exception as error:  # ValueError/TypeError: the client's mistake; anything else: the server's
            handoff.answer.set_exception(error)
            return
        self.streams[request_id] = handoff
        handoff.answer.set_result(request_id)
        if self.engine.requests[request_id].is_done:  # max_new_tokens=0: finished on arrival
            self._finish(request_id)

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as error:  # a server bug: end every request with the error, keep serving
            log.exception("engine step failed")
            self._fail_all(f"The engine failed: {type(error).__name__}: {error}")
            return
        for request_id, token_id, piece, finish in outputs:
            self.metrics.generated.inc()
            if request_id in self.streams:
                self._send(request_id, TokenEvent(piece, token_id))
            if finish is not None:
                self._finish(request_id)

    def _finish(self, request_id: int) -> None:
        """Send a request's last event (its reason and metrics) and forget its stream."""
        request_metrics = self.engine.metrics(request_id)
        self._send(request_id, TokenEvent("", None, request_metrics.finish_reason, request_metrics))
        del self.streams[request_id]
        self.engine.release(request_id)
        self.metrics.observe_finished(request_metrics)  # last: once counted, a request is wholly gone

    def _fail_all(self, message: str) -> None:
        for request_id in list(self.streams):
            self.engine.abort(request_id)
            self._send(request_id, TokenEvent("", None, "error", self.engine.metrics(request_id), message))
            del self.streams[request_id]
            self.engine.release(request_id)

    def _send(self, request_id: int, event: TokenEvent) -> None:
        handoff = self.streams[request_id]
        try:
            handoff.loop.call_soon_threadsafe(handoff.events.put_nowait, event)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            log.debug("request %s: event loop closed", request_id)

    def _publish_load(self) -> None:
        self.load = self.engine.load()
        self.metrics.set_load(self.load.running, self.load.waiting, self.load.blocks_used, self.load.blocks_total)
