"""What each rank runs in notebook 16's tensor-parallel cells: `run_ranks(function, world, ...)` calls these
in every process (labkit.parallel.ranks), each rank loading the model and keeping its own shard.

    tp_logits        the logits of a prompt, [B, T, vocab] (rank 0's; every rank holds the same)
    tp_generate      greedy text through labkit's `generate`, run on every rank in step
    tp_decode_costs  the median seconds of a decode step at a given context, and the collectives' share
    link_seconds     the median seconds of one all-reduce of n float32 numbers: the measured link

With world 1 the model runs whole in one process (no shard, no collective): the baseline a split must beat.

    >>> logits = run_ranks(tp_logits, 2, "smollm2-135m", ids)[0]
    >>> one = run_ranks(tp_logits, 1, "smollm2-135m", ids, threads=2)[0]
    >>> (logits - one).abs().max()   # float32 rounding: the sums run in another order
    tensor(2.3e-05)
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from labkit.core.forward import decode_step
from labkit.core.llama import Llama
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


def tp_logits(rank: int, world: int, model_name: str, ids: torch.Tensor) -> torch.Tensor | None:
    """ids [B, T] -> logits [B, T, vocab] float32 on rank 0 (None elsewhere: the same tensor, not sent twice)."""
    with torch.no_grad():
        logits = rank_model(model_name, rank, world)(ids)
    return logits if rank == 0 else None


def tp_generate(rank: int, world: int, model_name: str, prompt: str, max_new_tokens: int) -> str | None:
    """Greedy continuation of `prompt` (labkit.generate on this rank's shard), rank 0's text."""
    model = rank_model(model_name, rank, world)
    text = generate_text(model, load_tokenizer(model_name), prompt, max_new_tokens=max_new_tokens)
    return text if rank == 0 else None


def tp_decode_costs(rank: int, world: int, model_name: str, context: int, repeats: int) -> dict:
    """One batch-1 decode step with `context` tokens cached: {"seconds": median of `repeats` steps,
    "collective_seconds": the all-reduces' and all-gather's median share of a step, "calls": collectives a
    step}. Every rank times its own steps; they run in lockstep, so rank 0's numbers stand for the step."""
    model = rank_model(model_name, rank, world)
    ids = torch.arange(context + 1).remainder(model.config.vocab_size - 1).unsqueeze(0) + 1  # any real ids
    cache = model.new_cache(1, context + 1)  # a shard's: its own KV heads only
    steps, shares = [], []
    with torch.no_grad():
        model(ids[:, :context], cache)
        for repeat in range(repeats + 1):  # the first: a warm-up
            model.clock.reset()
            start = time.perf_counter()
            decode_step(model, ids[:, context], cache)
            seconds = time.perf_counter() - start
            cache.crop(context)
            if repeat:
                steps.append(seconds)
                shares.append(model.clock.seconds)
    return {
        "seconds": statistics.median(steps),
        "collective_seconds": statistics.median(shares),
        "calls": model.clock.calls,
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
