"""What each rank runs in notebook 16's tensor-parallel cells: `run_ranks(tp_session, world, ...)` calls it
in every process (labkit.parallel.ranks), each rank loading the model and keeping its own shard.

    tp_session       from one start of the ranks (each start loads the model): the logits of a prompt, its
                     greedy text, a decode step's cost and the link's speed
    decode_costs     a decode step's median seconds and its collectives' share (a shard's, or a whole model's)
    link_seconds     the median seconds of one all-reduce of n float32 numbers: the measured link

With world 1 the model runs whole in one process (no shard, no collective): the baseline a split must beat.

    >>> first, second = run_ranks(tp_session, 2, "smollm2-135m", ids, "The capital of France is", 8, 256)
    >>> one = run_ranks(tp_session, 1, "smollm2-135m", ids, "The capital of France is", 8, 256, threads=2)[0]
    >>> (first["logits"] - one["logits"]).abs().max()   # float32 rounding: the sums run in another order
    tensor(5.2e-05)
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from labkit.core.arguments import check_int, check_text
from labkit.core.doors import check_tensor
from labkit.core.forward import decode_step
from labkit.core.llama import Llama, check_llama
from labkit.decoding.generate import generate_text
from labkit.models.loading import load_model, load_tokenizer
from labkit.parallel.tensor_parallel import Clock, shard_llama


def rank_model(model_name: str, rank: int, world: int) -> Llama:
    """labkit's model `model_name`, whole for world 1, else this rank's shard (its `.clock` counts)."""
    model, _ = load_model(model_name, impl="labkit")
    if world == 1:
        model.clock = Clock()
        return model
    return shard_llama(model, rank, world)


def decode_costs(model: Llama, context: int, repeats: int) -> dict:
    """One batch-1 decode step with `context` tokens cached: {"seconds": median of `repeats` steps,
    "collective_seconds": the all-reduces' and all-gather's median share of a step, "calls": collectives a
    step}. A model without a `.clock` (not a shard) has none. Every rank times its own steps; they run in
    lockstep, so a rank's step stands for the step, and a rank with less work waits longer in its collectives.

        >>> decode_costs(model, context=64, repeats=5)["seconds"]   # SmolLM2 float32, 2 threads
        0.081
    """
    check_llama(model, "decode_costs")
    check_int("context", context, minimum=1)
    check_int("repeats", repeats, minimum=1)
    clock = getattr(model, "clock", None) or Clock()
    ids = torch.arange(context + 1).remainder(model.config.vocab_size - 1).unsqueeze(0) + 1  # any real ids
    cache = model.new_cache(1, context + 1)  # a shard's: its own KV heads only
    steps, shares = [], []
    with torch.no_grad():
        model(ids[:, :context], cache)
        for repeat in range(repeats + 1):  # the first: a warm-up
            clock.reset()
            start = time.perf_counter()
            decode_step(model, ids[:, context], cache)
            seconds = time.perf_counter() - start
            cache.crop(context)
            if repeat:
                steps.append(seconds)
                shares.append(clock.seconds)
    return {
        "seconds": statistics.median(steps),
        "collective_seconds": statistics.median(shares),
        "calls": clock.calls,
    }


def link_seconds(rank: int, world: int, sizes: tuple[int, ...], repeats: int = 50) -> dict[int, float]:
    """The median seconds of one all-reduce of n float32 numbers, for each n of `sizes` (after 5 warm-ups)."""
    found = {}
    for n in sizes:
        tensor, times = torch.ones(n), []
        for repeat in range(repeats + 5):
            start = time.perf_counter()
            dist.all_reduce(tensor)
            if repeat >= 5:
                times.append(time.perf_counter() - start)
        found[n] = statistics.median(times)
    return found


def tp_session(
    rank: int, world: int, model_name: str, ids: torch.Tensor, prompt: str, max_new_tokens: int, context: int
) -> dict:
    """Notebook 16's tensor-parallel measurements from one start of the ranks (each start loads the model):
    {"logits": ids' logits [B, T, vocab] (rank 0's, else None), "text": greedy continuation of `prompt` (rank
    0's), "costs": `decode_costs` at `context` (every rank's own), "link": `link_seconds` of one hidden row (an
    all-reduce of a layer) and of one row of logits (the head's gather, priced as an all-reduce), world > 1}.

        >>> first, second = run_ranks(tp_session, 2, "smollm2-135m", ids, "The capital of France is", 8, 256)
        >>> first["costs"]["collective_seconds"] / first["costs"]["seconds"]   # the split's share of a step
        0.52
    """
    check_tensor("ids", ids, "[B, T] of token ids", dims=2)
    check_text("prompt", prompt, example="'The capital of France is'")
    check_int("max_new_tokens", max_new_tokens, minimum=1)
    check_int("context", context, minimum=1)
    model = rank_model(model_name, rank, world)
    with torch.no_grad():
        logits = model(ids)
    text = generate_text(model, load_tokenizer(model_name), prompt, max_new_tokens=max_new_tokens)
    hidden = model.config.hidden_size
    return {
        "logits": logits if rank == 0 else None,
        "text": text if rank == 0 else None,
        "costs": decode_costs(model, context, repeats=5),
        "link": link_seconds(rank, world, (hidden, model.config.vocab_size)) if world > 1 else {},
    }
