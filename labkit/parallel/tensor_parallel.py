"""Tensor parallelism the Megatron way (Shoeybi et al. 2019): one model's every layer split across ranks.

Each rank keeps a slice of every large matrix and computes its share of every layer; the ranks talk twice a
block, with one all-reduce (a sum over ranks) after attention and one after the MLP:

    attention  q, k, v projections split by heads (their output rows: "column parallel"), each rank attends
               with its own heads and KV cache; o_proj split by its input columns ("row parallel"): each rank's
               product is a partial sum of the full output, and the all-reduce adds them up.
    MLP        gate and up split by their output rows, down by its input columns: silu(gate) * up stays local,
               one all-reduce after down.
    head       the output head split by vocabulary rows; the ranks' logits are gathered into the full row.
    replicated the embedding, the norms (the same work on every rank: small).

Heads go by KV groups, so a rank's query heads always share its own keys: SmolLM2's 3 KV heads (9 query heads)
over 2 ranks are 2 + 1 groups, an uneven split (vLLM refuses a head count the tensor-parallel size does not
divide; the split itself does not need it). Each rank's shard is a labkit `Llama` with a smaller config, so
`generate`, a `KVCache` (of the rank's heads alone) and every decoder run on it unchanged; the ranks must run
the same calls in the same order, since every forward pass meets the others in its all-reduces.

    >>> # in each of `world` processes, after torch.distributed.init_process_group("gloo", ...)
    >>> shard = shard_llama(model, rank, world)   # this rank's slices; the others hold the rest
    >>> logits = shard(ids)                       # [B, T, vocab], equal on every rank
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch
import torch.distributed as dist
from torch import nn

from labkit.core.arguments import check_int
from labkit.core.llama import Llama, check_llama


def even_split(size: int, world: int) -> list[range]:
    """`size` items over `world` ranks, in order, the first ranks one larger where it does not divide.

    >>> even_split(3, 2)
    [range(0, 2), range(2, 3)]
    """
    check_int("world", world, minimum=1)
    if size < world:
        raise ValueError(f"{size} items cannot be split over {world} ranks: every rank needs at least one.")
    base, extra = divmod(size, world)
    starts = [rank * base + min(rank, extra) for rank in range(world + 1)]
    return [range(starts[rank], starts[rank + 1]) for rank in range(world)]


class Clock:
    """Seconds spent in collectives (all-reduce, all-gather) since the last `reset`: what the split costs."""

    def __init__(self) -> None:
        self.seconds, self.calls = 0.0, 0

    def reset(self) -> None:
        self.seconds, self.calls = 0.0, 0

    def timed(self, collective, tensor: torch.Tensor, *args) -> None:
        start = time.perf_counter()
        collective(tensor, *args)
        self.seconds += time.perf_counter() - start
        self.calls += 1


class RowParallelLinear(nn.Module):
    """A linear layer holding some of its input columns: x [..., in/world] -> the full [..., out], the ranks'
    partial products summed by one all-reduce."""

    def __init__(self, weight: torch.Tensor, clock: Clock):
        super().__init__()
        self.weight = nn.Parameter(weight.contiguous(), requires_grad=False)  # [out, this rank's inputs]
        self.clock = clock

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        partial = nn.functional.linear(x, self.weight)
        self.clock.timed(dist.all_reduce, partial)
        return partial


class VocabParallelHead(nn.Module):
    """The output head holding a slice of the vocabulary's rows: x [..., hidden] -> [..., vocab], each rank's
    logits gathered (every slice padded to the largest, as all_gather needs equal sizes)."""

    def __init__(self, weight: torch.Tensor, slices: list[range], clock: Clock):
        super().__init__()
        self.weight = nn.Parameter(weight.contiguous(), requires_grad=False)  # [this rank's vocab, hidden]
        self.slices, self.clock = slices, clock

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        width = max(len(s) for s in self.slices)
        local = nn.functional.linear(x, self.weight)
        padded = nn.functional.pad(local, (0, width - local.shape[-1]))
        parts = [torch.empty_like(padded) for _ in self.slices]
        self.clock.timed(dist.all_gather, parts, padded.contiguous())
        return torch.cat([part[..., : len(s)] for part, s in zip(parts, self.slices)], dim=-1)


def rows_of_heads(heads: range, head_dim: int) -> slice:
    """The rows of a q/k/v projection (or columns of o_proj) that belong to consecutive `heads`."""
    return slice(heads.start * head_dim, heads.stop * head_dim)


def shard_block(block: nn.Module, shard: nn.Module, kv_heads: range, mlp: range, group: int, clock: Clock):
    """Copy one block's slices into `shard` (a block of the rank's smaller config): heads `kv_heads` (and
    their `group` query heads each), MLP columns `mlp`; o_proj and down_proj become row-parallel."""
    attn, mine, c = block.self_attn, shard.self_attn, block.self_attn.config
    q_heads = range(kv_heads.start * group, kv_heads.stop * group)
    with torch.no_grad():
        mine.q_proj.weight.copy_(attn.q_proj.weight[rows_of_heads(q_heads, c.head_dim)])
        mine.k_proj.weight.copy_(attn.k_proj.weight[rows_of_heads(kv_heads, c.head_dim)])
        mine.v_proj.weight.copy_(attn.v_proj.weight[rows_of_heads(kv_heads, c.head_dim)])
        mine.o_proj = RowParallelLinear(attn.o_proj.weight[:, rows_of_heads(q_heads, c.head_dim)], clock)
        columns = slice(mlp.start, mlp.stop)
        shard.mlp.gate_proj.weight.copy_(block.mlp.gate_proj.weight[columns])
        shard.mlp.up_proj.weight.copy_(block.mlp.up_proj.weight[columns])
        shard.mlp.down_proj = RowParallelLinear(block.mlp.down_proj.weight[:, columns], clock)
        for name in ("input_layernorm", "post_attention_layernorm"):
            getattr(shard, name).weight.copy_(getattr(block, name).weight)


def shard_llama(model: Llama, rank: int, world: int, clock: Clock | None = None) -> Llama:
    """Rank `rank`'s shard of labkit's Llama across `world` ranks (see the module's docstring): a Llama of
    its share of the KV heads (with their query heads) and MLP columns, whose o_proj and down_proj all-reduce
    and whose head gathers the vocabulary. clock: where the collectives' seconds add up (a new Clock if None;
    the shard's `.clock`). Call it with torch.distributed initialised, world ranks in the group.

        >>> shard = shard_llama(model, rank=0, world=2)   # SmolLM2: KV heads 0-1, MLP columns 0-767
        >>> shard.config.n_heads, shard.config.n_kv_heads, shard.config.intermediate_size
        (6, 2, 768)
    """
    model = check_llama(model, "shard_llama")
    check_int("world", world, minimum=1)
    check_int("rank", rank, minimum=0, maximum=world - 1, note="one of the world's ranks")
    c = model.config
    group = c.n_heads // c.n_kv_heads
    kv_heads = even_split(c.n_kv_heads, world)[rank]
    mlp = even_split(c.intermediate_size, world)[rank]
    vocab = even_split(c.vocab_size, world)
    config = replace(
        c,
        n_heads=len(kv_heads) * group,
        n_kv_heads=len(kv_heads),
        intermediate_size=len(mlp),
        tie_word_embeddings=False,
    )
    clock = Clock() if clock is None else clock
    with torch.device("meta"):
        shard = Llama(config)
    shard = shard.to_empty(device="cpu").eval()
    for block, mine in zip(model.layers, shard.layers):
        shard_block(block, mine, kv_heads, mlp, group, clock)
    with torch.no_grad():
        shard.embed_tokens.weight.copy_(model.embed_tokens.weight)
        shard.norm.weight.copy_(model.norm.weight)
    head_rows = model.lm_head.weight[vocab[rank].start : vocab[rank].stop]
    shard.lm_head = VocabParallelHead(head_rows, vocab, clock)
    shard.clock = clock
    return shard
