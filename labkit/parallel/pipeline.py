"""Pipeline parallelism (GPipe, Huang et al. 2019): the model's layers cut into consecutive stages, one per
rank, and a batch cut into micro-batches that flow through them, each stage sending its activations on to
the next (`torch.distributed.send` / `recv` over gloo).

With S stages of equal time t per micro-batch, M micro-batches take (M + S - 1) t: the first stage waits for
nothing and the last for S - 1 micro-batches to arrive, so each rank is idle for a **bubble** of

    bubble = (S - 1) / (M + S - 1)        S = 2:  M = 1: 50 %,  2: 33 %,  4: 20 %,  8: 11 %

of the run. More micro-batches shrink the bubble; each is smaller, so every matmul is narrower.

    >>> run_ranks(pp_forward, 2, "smollm2-135m", ids, 4)[-1]["bubble"]   # ids [8, T], 4 micro-batches of 2
    0.21
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from labkit.core.arguments import check_int
from labkit.core.attention import rotary_cos_sin
from labkit.core.doors import check_items, check_tensor
from labkit.core.llama import Llama, check_llama
from labkit.models.loading import load_model


def bubble_fraction(stages: int, micro_batches: int) -> float:
    """The share of a pipeline run each stage waits, with equal stage times: (S - 1) / (M + S - 1).

    >>> bubble_fraction(2, 4)
    0.2
    """
    check_int("stages", stages, minimum=1)
    check_int("micro_batches", micro_batches, minimum=1)
    return (stages - 1) / (micro_batches + stages - 1)


def stage_layers(model: Llama, world: int) -> list[range]:
    """Consecutive runs of the model's layers, one per stage, balanced by their parameters with the output
    head's counted on the last stage (SmolLM2's head, 28M numbers, weighs about 8 of its 3.5M-number layers).

    >>> stage_layers(smollm2, 2)   # 19 layers, then 11 and the head
    [range(0, 19), range(19, 30)]
    """
    check_llama(model, "stage_layers")
    check_int("world", world, minimum=1, maximum=model.config.n_layers, note="a layer for every stage")
    layer = sum(p.numel() for p in model.layers[0].parameters())
    n, head = model.config.n_layers, model.lm_head.weight.numel()
    total, start, stages = n * layer + head, 0, []
    for stage in range(world - 1):
        stop = round(total * (stage + 1) / world / layer)
        stop = max(start + 1, min(n - (world - 1 - stage), stop))  # every stage keeps at least one layer
        stages.append(range(start, stop))
        start = stop
    return stages + [range(start, n)]


def run_stage(model: Llama, layers: range, x: torch.Tensor) -> torch.Tensor:
    """The blocks `layers` of labkit's Llama over x [B, T, hidden] (positions 0..T-1, no cache, causal)."""
    positions = torch.arange(x.shape[1])
    cos, sin = rotary_cos_sin(positions, model.config.head_dim, model.config.rope_theta)
    for index in layers:
        x = model.layers[index](x, cos, sin, None, index)
    return x


def pp_forward(rank: int, world: int, model_name: str, ids: torch.Tensor, micro_batches: int) -> dict:
    """ids [B, T] through `world` stages of labkit's `model_name` (rank r: the r-th run of layers of
    `stage_layers`; rank 0 embeds, the last rank applies the norm and head), in `micro_batches` equal micro-batches of rows.
    Returns {"logits": [B, T, vocab] on the last rank (else None), "busy": seconds this rank computed,
    "total": seconds from the common start to the last stage's end, "bubble": 1 - busy / total}.

    Measured so (SmolLM2, ids [8, 64], 2 stages of 19 and 11 layers + head, 1 thread each, 2-core Intel Xeon,
    idle, one run): bubble (rank 0 / rank 1) 0.54 / 0.48, 0.35 / 0.37, 0.25 / 0.26 and 0.17 / 0.16 at 1, 2, 4
    and 8 micro-batches, against the formula's 0.50, 0.33, 0.20 and 0.11: smaller micro-batches compute less
    efficiently (rank 1 busy 0.97 s at 4, 1.27 s at 8). The runs took 2.38, 1.36, 1.31 and 1.52 s; one process
    of 2 threads, 1.61 s."""
    model, _ = load_model(model_name, impl="labkit")
    return pipeline_run(model, rank, world, ids, micro_batches)


def pp_sweep(
    rank: int, world: int, model_name: str, ids: torch.Tensor, micro_batch_counts: tuple
) -> list[dict]:
    """`pp_forward` at each count of `micro_batch_counts`, the model loaded once (notebook 16), without the
    logits: [{"micro_batches": M, "busy": ..., "total": ..., "bubble": ...}, ...] for this rank.

        >>> [run["bubble"] for run in run_ranks(pp_sweep, 2, "smollm2-135m", ids, (1, 2, 4, 8))[1]]
        [0.48, 0.37, 0.26, 0.16]
    """
    check_tensor("ids", ids, "[B, T] of token ids", dims=2)
    counts = check_items(
        "micro_batch_counts", micro_batch_counts, "micro-batch counts such as (1, 2, 4, 8)", of=int
    )
    model, _ = load_model(model_name, impl="labkit")
    runs = []
    for micro_batches in counts:
        run = pipeline_run(model, rank, world, ids, micro_batches)
        runs.append({"micro_batches": micro_batches, **{k: v for k, v in run.items() if k != "logits"}})
    return runs


def pipeline_run(model: Llama, rank: int, world: int, ids: torch.Tensor, micro_batches: int) -> dict:
    """This rank's stage of `pp_forward` for a model already loaded (the same returns)."""
    check_int("micro_batches", micro_batches, minimum=1, maximum=ids.shape[0], note="at most one row each")
    layers = stage_layers(model, world)[rank]
    last = rank == world - 1
    outputs, sends, busy = [], [], 0.0
    dist.barrier()  # every stage loaded: the clock starts for all at once
    start = time.perf_counter()
    with torch.no_grad():
        for rows in ids.tensor_split(micro_batches):
            if rank == 0:
                x = model.embed_tokens(rows)
            else:
                x = torch.empty(*rows.shape, model.config.hidden_size)
                dist.recv(x, rank - 1)
            began = time.perf_counter()
            x = run_stage(model, layers, x)
            if last:
                outputs.append(model.logits(x))
            busy += time.perf_counter() - began
            if not last:
                sends.append(dist.isend(x.contiguous(), rank + 1))  # the next micro-batch starts at once
        for send in sends:
            send.wait()
    dist.barrier()  # the run ends for every stage when the last one ends: an early finisher's wait is bubble
    total = time.perf_counter() - start
    logits = torch.cat(outputs) if last else None
    return {"logits": logits, "busy": busy, "total": total, "bubble": 1 - busy / total}
