"""Disaggregated prefill and decode in two real processes (DistServe; vLLM's disaggregated prefilling), and
the colocated replicas it is measured against (notebook 16; the measurement is labkit.parallel.disagg_run).

A **prefill worker** (rank 0 of `run_ranks`, one torch thread) admits the trace's requests as they arrive,
runs their prompts and chooses each first token with the request's own options; then
`Engine.export_prefill` gathers the prompt's keys and values straight into a **slot**: a tensor in shared
memory that the prefill worker made and sent once, before the trace starts (torch's shared memory: a file
descriptor each process maps, unlinked at once, so nothing is left in /dev/shm), and the request leaves that
engine. A message on a queue (a few kilobytes of pickled ids, options and generator state, no tensor) tells
the **decode worker** (rank 1) which slot holds it; that worker seats the request (`Engine.add_prefilled`:
blocks from its own block manager, the slot's blocks copied ONCE into its pool), hands the slot back on a
second queue, and decodes. Each hand-off's bytes, its gather (prefill side) and its copy (decode side) are
timed. A request whose first token ends it (EOS) never leaves the prefill worker. With SLOTS slots, at most
that many hand-offs wait for the decode worker at once; the prefill worker waits for a slot beyond that.

**Colocated** (`run_colocated`): the same two cores as two replicas of one thread, each a whole engine that
prefills and decodes its own share of the trace (round-robin by arrival), with chunked prefill.

Times are on time.perf_counter, CLOCK_MONOTONIC on Linux: one clock for every process of the machine, so a
request's TTFT runs from its arrival (the trace's start, set by rank 0 once both workers are loaded, plus its
offset) to its first token on the prefill side, and its TPOT over the decode side's tokens.

    >>> trace = mixed_trace(tokenizer, n_long=2, n_short=4)
    >>> options = {"max_num_seqs": 8}
    >>> prefill, decode = run_ranks(disaggregated_rank, 2, "smollm2-135m", trace, queues(), options)
    >>> prefill["bytes"], sum(prefill["gather_s"]), sum(decode["copy_s"])    # what the hand-offs moved, took
"""

from __future__ import annotations

import math
import multiprocessing as mp
import pickle
import queue
import random
import time
from collections import deque
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.text import chat_prompt
from labkit.serving.engine import Engine
from labkit.serving.handoff import has_room, kv_shape
from labkit.serving.workload import QUESTIONS

BLOCK_SIZE = 16
WAIT_S = 120.0  # the longest a worker waits for a message (a peer that died)
SLOTS = 4  # hand-offs in flight at once: the prefill worker waits for a free slot beyond that


@dataclass(frozen=True)
class TraceRequest:
    """One request of an arrival trace: when it arrives (seconds after the start), its prompt, its answer."""

    arrival_s: float
    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    kind: str  # "long" or "short"


def long_prompt(tokenizer: PreTrainedTokenizerBase, tokens: int, rng: random.Random) -> tuple[int, ...]:
    """A chat asking to summarise a text of shuffled sentences, grown to about `tokens` tokens."""
    sentences, text = list(QUESTIONS), ""
    while True:
        rng.shuffle(sentences)
        for sentence in sentences:
            ids = chat_prompt(tokenizer, "Summarize the following in one sentence. " + text)
            if len(ids) >= tokens:
                return tuple(ids)
            text += sentence + " "


def mixed_trace(
    tokenizer: PreTrainedTokenizerBase,
    n_long: int = 2,
    n_short: int = 6,
    max_new_tokens: int = 16,
    mean_gap_s: float = 1.5,
    long_tokens: tuple[int, int] = (400, 600),
    seed: int = 0,
) -> list[TraceRequest]:
    """n_long prompts of long_tokens tokens (summaries) among n_short chat questions (35-55 tokens),
    spread evenly, arriving with exponential gaps of mean `mean_gap_s` (the first at 0), each answering up to
    max_new_tokens greedily. A seed reproduces it.

    >>> [(r.kind, len(r.prompt_ids), r.arrival_s) for r in mixed_trace(tokenizer, 1, 2)]
    [('short', 51, 0.0), ('long', 536, 0.062), ('short', 43, 0.939)]
    """
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise TypeError(
            f"tokenizer must be a chat model's tokenizer (load_tokenizer), got {type(tokenizer).__name__}."
        )
    check_int("n_long", n_long, minimum=0)
    check_int("n_short", n_short, minimum=0)
    check_int("max_new_tokens", max_new_tokens, minimum=2, note="a hand-off needs a token after the first")
    if n_long + n_short < 1 or not (isinstance(mean_gap_s, (int, float)) and mean_gap_s > 0):
        raise ValueError(
            f"Need n_long + n_short >= 1 and mean_gap_s > 0, got {n_long}, {n_short}, {mean_gap_s!r}."
        )
    low, high = long_tokens
    if not 64 <= low <= high:
        raise ValueError(f"long_tokens must be (low, high) with 64 <= low <= high, got {long_tokens!r}.")
    rng, n = random.Random(seed), n_long + n_short
    longs = {int((i + 0.5) * n / n_long) for i in range(n_long)} if n_long else set()
    questions = rng.sample(QUESTIONS[:12], min(12, n_short)) * math.ceil(n_short / 12)
    trace, arrival = [], 0.0
    for i in range(n):
        arrival += rng.expovariate(1 / mean_gap_s) if i else 0.0
        if i in longs:
            ids, kind = long_prompt(tokenizer, rng.randint(low, high), rng), "long"
        else:
            ids, kind = tuple(chat_prompt(tokenizer, questions.pop())), "short"
        trace.append(TraceRequest(round(arrival, 3), ids, max_new_tokens, kind))
    return trace


def queues() -> tuple:
    """(hand-offs: prefill -> decode, free slots: decode -> prefill), for the spawned workers."""
    context = mp.get_context("spawn")
    return context.Queue(), context.Queue()


def make_slots(engine: Engine, trace: list[TraceRequest], n: int = SLOTS) -> torch.Tensor:
    """n slots in shared memory [n, numel], each the size of the keys and values of the trace's longest
    prompt in `engine`'s pool, [2, *kv_shape]."""
    numel = 2 * math.prod(kv_shape(engine, max(len(r.prompt_ids) for r in trace)))
    return torch.empty(n, numel, dtype=engine.pool.keys.dtype).share_memory_()


def load_engine(model, options: dict, tokenizer=None) -> Engine:
    """An engine on `model` (a name: loaded here, labkit's implementation; or a loaded model with its
    tokenizer), run once on a short prompt so that the first timed step is not its first forward pass."""
    if isinstance(model, str):
        from labkit.models.loading import load_model

        model, tokenizer = load_model(model, impl="labkit")
    engine = Engine(model, tokenizer, block_size=BLOCK_SIZE, **options)
    engine.generate_batch([chat_prompt(tokenizer, "Hi")], max_new_tokens=2)
    return engine


def start_together() -> float:
    """The trace's start on the shared clock: both workers loaded, rank 0's now + 50 ms, agreed over gloo."""
    dist.barrier()
    start = [time.perf_counter() + 0.05]
    dist.broadcast_object_list(start, src=0)
    return start[0]


def record(engine: Engine, request_id: int, index: int) -> dict:
    """What the measurement keeps of a finished request, which the engine then forgets: its tokens and its
    times, on the shared clock."""
    seq = engine.release(request_id)
    m = seq.metrics()
    return {"index": index, "tokens": list(seq.output_ids), "ttft_s": m.ttft_s, "tpot_s": m.tpot_s,
            "finish_s": seq.finish_s, "finish": seq.finish_reason}  # fmt: skip


def serve_arrivals(
    engine: Engine, trace: list[TraceRequest], indices: list[int], start: float, on_output
) -> None:
    """Add trace[i] for i in indices at start + its arrival, step while anything runs, and call
    on_output(request id, trace index, finish) for every token chosen; until all are done."""
    waiting, ids = deque(sorted(indices, key=lambda i: trace[i].arrival_s)), {}
    while waiting or engine.has_unfinished():
        now = time.perf_counter()
        while waiting and start + trace[waiting[0]].arrival_s <= now:
            i = waiting.popleft()
            request = trace[i]
            rid = engine.add_request(list(request.prompt_ids), max_new_tokens=request.max_new_tokens,
                                     arrival_s=start + request.arrival_s)  # fmt: skip
            ids[rid] = i
        if not engine.has_unfinished():
            time.sleep(max(0.0, min(0.005, start + trace[waiting[0]].arrival_s - now)))
            continue
        for out in engine.step():
            on_output(out.request_id, ids[out.request_id], out.finish_reason)


def prefill_side(engine: Engine, trace: list[TraceRequest], start: float, slots, handoffs, free) -> dict:
    """Rank 0: every request's prompt and first token; hand each one over through a free slot."""
    done, gathers, nbytes = [], [], 0
    free_slots = deque(range(len(slots)))

    def on_output(rid: int, index: int, finish: str | None) -> None:
        nonlocal nbytes
        if finish is not None:  # its first token ended it: nothing to hand over
            done.append(record(engine, rid, index))
            handoffs.put(("done", index, done[-1]))
            return
        if not free_slots:
            free_slots.append(free.get(timeout=WAIT_S))
        slot = free_slots.popleft()
        shape = (2, *kv_shape(engine, len(trace[index].prompt_ids)))
        began = time.perf_counter()
        handoff = engine.export_prefill(rid, out=slots[slot][: math.prod(shape)].view(shape))
        gathers.append(time.perf_counter() - began)
        nbytes += handoff.nbytes
        light = replace(handoff, keys=torch.empty(0), values=torch.empty(0))
        handoffs.put(("handoff", index, slot, shape, pickle.dumps(light)))

    serve_arrivals(engine, trace, list(range(len(trace))), start, on_output)
    return {"records": done, "gather_s": gathers, "bytes": nbytes}


def decode_side(engine: Engine, n_requests: int, slots, handoffs, free) -> dict:
    """Rank 1: seat each hand-off as room allows (one copy from its slot into the pool), give the slot
    back, decode; until every request of the trace has come and finished."""
    records, copies, pending, ids, heard = [], [], deque(), {}, 0
    while heard < n_requests or pending or engine.has_unfinished():
        idle = not pending and not engine.has_unfinished()
        try:
            while heard < n_requests:
                message = handoffs.get(timeout=WAIT_S) if idle else handoffs.get_nowait()
                heard, idle = heard + 1, False
                if message[0] == "done":
                    records.append(message[2])
                else:
                    pending.append(message)
        except queue.Empty:
            if idle:
                raise RuntimeError(f"decode worker: no hand-off within {WAIT_S:.0f} s") from None
        while pending:
            _, index, slot, shape, payload = pending[0]
            light = pickle.loads(payload)
            if not has_room(engine, [*light.prompt_ids, light.first_token]):
                break
            kv = slots[slot][: math.prod(shape)].view(shape)
            began = time.perf_counter()
            ids[engine.add_prefilled(replace(light, keys=kv[0], values=kv[1]))] = index
            copies.append(time.perf_counter() - began)
            free.put(slot)
            pending.popleft()
        for out in engine.step() if engine.has_unfinished() else ():
            if out.finish_reason is not None:
                records.append(record(engine, out.request_id, ids[out.request_id]))
    return {"records": records, "copy_s": copies}


def run_disaggregated(engine: Engine, rank: int, trace: list[TraceRequest], channels: tuple) -> dict:
    """This rank's part of the trace disaggregated: rank 0 prefills, rank 1 decodes (module doc). Rank 0 makes
    the slots and sends them once, before the start. Its records, hand-off timings, and the trace's start."""
    handoffs, free = channels
    if rank == 0:
        slots = make_slots(engine, trace)
        handoffs.put(("slots", slots))
    else:
        slots = handoffs.get(timeout=WAIT_S)[1]
    start = start_together()
    if rank == 0:
        out = prefill_side(engine, trace, start, slots, handoffs, free)
    else:
        out = decode_side(engine, len(trace), slots, handoffs, free)
    return {**out, "start": start}


def run_colocated(engine: Engine, rank: int, world: int, trace: list[TraceRequest]) -> dict:
    """Replica `rank` of `world`: a whole engine serving trace requests rank, rank + world, ... by arrival."""
    start = start_together()
    order = sorted(range(len(trace)), key=lambda i: trace[i].arrival_s)
    records = []

    def on_output(rid: int, index: int, finish: str | None) -> None:
        if finish is not None:
            records.append(record(engine, rid, index))

    serve_arrivals(engine, trace, order[rank::world], start, on_output)
    return {"records": records, "start": start}


def disaggregated_rank(
    rank: int, world: int, model: str, trace: list, channels: tuple, options: dict
) -> dict:
    """For run_ranks: load `model` and play `trace` disaggregated (rank 0 prefills, rank 1 decodes)."""
    if world != 2:
        raise ValueError(
            f"disaggregated_rank runs a prefill and a decode worker: world must be 2, got {world}."
        )
    return run_disaggregated(load_engine(model, {**options, "chunked_prefill": False}), rank, trace, channels)


def session_rank(
    rank: int, world: int, model: str, trace: list, channels: tuple, options: dict, colocated: dict
) -> dict:
    """For run_ranks: load `model` once, play `trace` disaggregated (engine `options`, prefill first), then
    colocated (engine `colocated`: this rank a replica), one engine at a time; both runs' results."""
    from labkit.models.loading import load_model

    llm, tokenizer = load_model(model, impl="labkit")
    engine = load_engine(llm, {**options, "chunked_prefill": False}, tokenizer)
    disaggregated = run_disaggregated(engine, rank, trace, channels)
    del engine  # its pool, before the next one's
    engine = load_engine(llm, colocated, tokenizer)
    return {"disaggregated": disaggregated, "colocated": run_colocated(engine, rank, world, trace)}
