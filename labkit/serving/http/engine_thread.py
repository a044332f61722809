"""The serving engine in a thread of its own, fed and read by asyncio code without blocking it.

The event loop never touches the `Engine`: it puts commands (add, abort) in a thread-safe inbox and
reads each request's tokens from an `asyncio.Queue` of its own, which the engine thread fills with
`loop.call_soon_threadsafe`. The thread steps while any request is unfinished and sleeps on the inbox
otherwise. An add is answered (request id, or the error) before the next step.

A request of `n` samples is one group in the engine (one prefill, `Engine.samples`): every sample's events
go to the request's one queue, each marked with its `index` (0..n-1), and each sample ends with a last
event of its own. Aborting the request (its id is sample 0's) stops every sample; the group is released
once all its samples are done. With `logprobs=k`, each token's event carries its `TokenLogprob` (the
engine's `Output` carries it). A request travels as one `RequestSpec`, handed to `Engine.add_request` whole.

    thread = EngineThread(Engine(model, tokenizer, max_num_seqs=8, max_waiting=64))
    thread.start()
    spec = RequestSpec(prompt_ids, DecodingConfig(max_new_tokens=16), arrival_s=time.perf_counter())
    request_id, events = await thread.submit(spec)
    while (event := await events.get()).finish_reason is None:
        print(event.text, end="")
    request_id, events = await thread.submit(RequestSpec(prompt_ids, config, n=3, logprobs=2))  # index 0-2
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace

import torch

from labkit.serving.admission import EngineBusy, EngineLoad
from labkit.serving.engine import Engine
from labkit.serving.http.server_metrics import ServerMetrics
from labkit.serving.request import EngineRequestMetrics, TokenLogprob
from labkit.serving.request_spec import RequestSpec

log = logging.getLogger("labkit.serving.http")


@dataclass(frozen=True)
class TokenEvent:
    """One token of a request's sample as it leaves the engine (or the sample's last event: its end, or the
    error that ended it)."""

    text: str  # the text this token adds ('' while a character is incomplete)
    token_id: int | None  # None on a last event
    finish_reason: str | None = None  # "eos", "length", "stop", "abort" or "error" on the last event
    metrics: EngineRequestMetrics | None = None  # on the last event: queue, TTFT, TPOT, counts of this sample
    error: str | None = None  # what went wrong inside the server (finish_reason "error")
    index: int = 0  # which of the request's n samples (0..n-1): OpenAI's choice index
    logprob: TokenLogprob | None = None  # the token's log-probability and alternatives, when asked for


@dataclass
class EngineHandoff:
    spec: RequestSpec  # the request, whole; its arrival_s stamped (time.perf_counter) before any wait
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue
    answer: Future  # the request id, or the exception add_request raised


@dataclass(frozen=True)
class SampleStream:
    """Where one sample's events go: its request's handoff, its index, and its group (sample 0's id)."""

    handoff: EngineHandoff
    index: int
    group_id: int


class EngineThread:
    """Owns an Engine; `submit` and `abort` are safe to call from the event loop (see the module doc)."""

    def __init__(self, engine: Engine, metrics: ServerMetrics | None = None, threads: int | None = None):
        """threads: torch threads the engine thread steps with (None: torch's default for a new thread);
        the server sets it, see labkit.serving.http.openmp_team."""
        if engine.clock is not time.perf_counter:
            raise ValueError(
                "The engine thread stamps arrivals with time.perf_counter: give the engine that clock."
            )
        self.engine, self.threads = engine, threads
        self.metrics = metrics or ServerMetrics()
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.streams: dict[int, SampleStream] = {}  # unfinished samples, by id (engine thread only)
        self.groups: dict[int, set[int]] = {}  # unfinished samples of each request, by its id (sample 0's)
        self.load: EngineLoad = engine.load()  # as last published: what /health and /api/ps show
        self.thread = threading.Thread(target=self._run, name="labkit-engine", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the thread to end after its current step and wait for it."""
        self.inbox.put(None)
        self.thread.join(timeout)

    async def submit(self, spec: RequestSpec) -> tuple[int, asyncio.Queue]:
        """Queue the request `spec` (its arrival_s on time.perf_counter, now if None); its id and the queue
        its `TokenEvent`s arrive on: those of its n samples, each ending with a last event.

        Raises EngineBusy when the engine's queue is full, ValueError/TypeError when it refuses the request.
        """
        loop = asyncio.get_running_loop()
        if spec.arrival_s is None:
            spec = replace(spec, arrival_s=time.perf_counter())
        handoff = EngineHandoff(spec, loop, asyncio.Queue(), Future())
        self.inbox.put(handoff)
        request_id = await asyncio.wrap_future(handoff.answer)
        return request_id, handoff.events

    def abort(self, request_id: int) -> None:
        """Stop a request, every sample, and free its KV blocks (at the engine thread's next turn); safe if it
        finished."""
        self.inbox.put(request_id)

    def _run(self) -> None:
        if self.threads is not None:
            torch.set_num_threads(self.threads)
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
            elif command in self.groups:
                self.engine.abort(command)  # sample 0's id: every sample
                for sample_id in sorted(self.groups[command]):
                    self._finish(sample_id)

    def _add(self, handoff: EngineHandoff) -> None:
        try:
            request_id = self.engine.add_request(handoff.spec)
        except EngineBusy as error:
            self.metrics.rejected.inc()
            handoff.answer.set_exception(error)
            return
        except Exception as error:  # ValueError/TypeError: the client's mistake; anything else: the server's
            handoff.answer.set_exception(error)
            return
        samples = self.engine.samples(request_id)
        self.groups[request_id] = set(samples)
        self.streams.update(
            (sample_id, SampleStream(handoff, index, request_id)) for index, sample_id in enumerate(samples)
        )
        handoff.answer.set_result(request_id)
        for sample_id in samples:
            if self.engine.requests[sample_id].is_done:  # max_new_tokens=0: finished on arrival
                self._finish(sample_id)

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as error:  # a server bug: end every request with the error, keep serving
            log.exception("engine step failed")
            self._fail_all(f"The engine failed: {type(error).__name__}: {error}")
            return
        for out in outputs:
            self.metrics.generated.inc()
            stream = self.streams.get(out.request_id)
            if stream is None:
                continue
            self._send(stream, TokenEvent(out.text, out.token_id, index=stream.index, logprob=out.logprob))
            if out.finish_reason is not None:
                self._finish(out.request_id)

    def _finish(self, sample_id: int) -> None:
        """Forget a sample's stream, release its request once every sample is done, count it, and send its last
        event (its reason and metrics): once counted, a request is wholly gone, and a client that has its
        answer finds it counted on /metrics."""
        stream, sample_metrics = self.streams.pop(sample_id), self.engine.metrics(sample_id)
        if stream.index == 0:  # a request's samples share one prefill: its prompt is counted once
            self.metrics.observe_prefix(
                sample_metrics.prompt_tokens, self.engine.requests[sample_id].prefix_cached_tokens
            )
        group = self.groups[stream.group_id]
        group.discard(sample_id)
        if not group:
            del self.groups[stream.group_id]
            self.engine.release(stream.group_id)
        self.metrics.observe_finished(sample_metrics)
        self._send(
            stream, TokenEvent("", None, sample_metrics.finish_reason, sample_metrics, index=stream.index)
        )

    def _fail_all(self, message: str) -> None:
        for group_id, samples in list(self.groups.items()):
            self.engine.abort(group_id)
            for sample_id in sorted(samples):
                stream = self.streams.pop(sample_id)
                self._send(
                    stream,
                    TokenEvent(
                        "", None, "error", self.engine.metrics(sample_id), message, index=stream.index
                    ),
                )
            del self.groups[group_id]
            self.engine.release(group_id)

    def _send(self, stream: SampleStream, event: TokenEvent) -> None:
        handoff = stream.handoff
        try:
            handoff.loop.call_soon_threadsafe(handoff.events.put_nowait, event)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            log.debug("request %s: event loop closed", stream.group_id)

    def _publish_load(self) -> None:
        self.load = self.engine.load()
        load = self.load
        window = (
            None if load.window_blocks_total is None else (load.window_blocks_used, load.window_blocks_total)
        )
        self.metrics.set_load(load.running, load.waiting, load.blocks_used, load.blocks_total, window)
