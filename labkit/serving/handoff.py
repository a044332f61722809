"""A finished prefill handed from one engine to another (disaggregated prefill and decode; vLLM's KV
transfer).

The prefill engine runs a prompt and chooses its first token as always (the request's own options and
generator). `export_prefill` then takes the request out of that engine and returns a `PrefillHandoff`: the
prompt's ids, the first token, the options, the generator's state, and the keys and values of the prompt's
blocks, gathered from the pool into `keys` and `values` [L, H, n_blocks, B, D] (into a buffer you give, e.g.
a tensor in shared memory, or a new one). `add_prefilled` seats it in another engine as a running request:
blocks for the prompt and its first token come from that engine's BlockManager (a prefix already cached
there is shared, not copied), the other blocks are written ONCE from the hand-off into its pool, and the
request decodes on as if that engine had prefilled it: same logits, same tokens, same generator draws. Its
blocks are freed when it finishes, like any request's.

The first token's text and stop-string state are replayed on the decode side from the same token (the text
it adds was already given out by the prefill side). Only a Llama's single pool is handed over: a Gemma3's
sliding-window pool is refused, and so are requests of n > 1 samples and constrained or thinking-budget
decoding (their transforms keep state this does not carry).

    >>> prefill, decode = Engine(model, tokenizer), Engine(model, tokenizer)
    >>> request_id = prefill.add_request("The sea is", max_new_tokens=16)
    >>> prefill.step()                                  # the prompt, and its first token
    >>> handoff = prefill.export_prefill(request_id)    # gone from `prefill`; handoff.nbytes of K/V
    >>> new_id = decode.add_prefilled(handoff)           # decodes the 15 others
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from labkit.decoding.config import DecodingConfig
from labkit.decoding.request import text_and_finish
from labkit.serving.request import EngineRequest, Status, TokenLogprob


@dataclass(frozen=True)
class PrefillHandoff:
    """What a decode engine needs to continue a request another engine prefilled.

    keys, values: [n_layers, n_kv_heads, n_blocks, block_size, head_dim], the blocks of the prompt in table
    order (the last one partly filled); times are on the prefill engine's clock (time.perf_counter by
    default: CLOCK_MONOTONIC on Linux, the same clock in every process of the machine).
    """

    prompt_ids: tuple[int, ...]
    first_token: int
    config: DecodingConfig
    eos_ids: frozenset[int]
    generator_state: torch.Tensor = field(repr=False)  # the request's generator after its first draw
    keys: torch.Tensor = field(repr=False)
    values: torch.Tensor = field(repr=False)
    arrival_s: float = 0.0
    scheduled_s: float = 0.0
    first_token_s: float = 0.0
    n_logprobs: int | None = None
    logprobs: tuple[TokenLogprob, ...] = ()

    @property
    def nbytes(self) -> int:
        """Bytes of keys and values handed over."""
        return self.keys.nbytes + self.values.nbytes


def kv_shape(engine, n_tokens: int) -> tuple[int, ...]:
    """[L, H, n_blocks, B, D] of the keys (or values) of n_tokens prompt tokens in engine's pool.

    >>> kv_shape(engine, 40)    # SmolLM2, blocks of 16: (30, 3, 3, 16, 64)
    """
    keys = engine.pool.keys  # [L, H, N, B, D]
    block_size = engine.pool.block_size
    return (keys.shape[0], keys.shape[1], math.ceil(n_tokens / block_size), block_size, keys.shape[4])


def refuse_windowed(engine, what: str) -> None:
    if engine.pools.window is not None:
        raise ValueError(
            f"{what} hands over a Llama's single KV pool; this engine runs {type(engine.model).__name__}, "
            "whose sliding-window layers keep a pool of their own (not supported): use a Llama (SmolLM2)."
        )


def check_exportable(engine, seq: EngineRequest) -> None:
    """Refuse, by name, a request that is not exactly one prefilled prompt with its first token."""
    refuse_windowed(engine, "export_prefill")
    if seq.siblings or seq.sample_index != 0:
        raise ValueError(
            f"export_prefill hands over a request of one sample; request {seq.request_id} has n > 1."
        )
    c = seq.config
    if c.json_schema is not None or c.grammar is not None or c.thinking_budget is not None or c.thinking_min:
        raise ValueError(
            f"export_prefill: request {seq.request_id} uses json_schema, grammar or a thinking budget, whose "
            "state the hand-off does not carry; hand over plain sampling or greedy requests."
        )
    if (
        seq.status is not Status.RUNNING
        or len(seq.output_ids) != 1
        or seq.num_cached_tokens != len(seq.prompt_ids)
    ):
        raise ValueError(
            "export_prefill needs a running request whose prompt is prefilled and whose first token is "
            "chosen "
            f"(the step after its prompt's last chunk); request {seq.request_id} is {seq.status.value} with "
            f"{len(seq.output_ids)} tokens and {seq.num_cached_tokens} of {len(seq.prompt_ids)} prompt "
            "tokens cached."
        )


def export_prefill(engine, request_id: int, out: torch.Tensor | None = None) -> PrefillHandoff:
    """Take a just-prefilled request out of `engine` and return its `PrefillHandoff` (module doc).

    out: where to gather the blocks, [2, *kv_shape(engine, prompt length)] (keys, then values), e.g. a
    tensor in shared memory; None: a new tensor. The request is finished there ("handoff") and forgotten;
    its blocks go back to the pool (named: a later prompt with the same prefix still finds them).
    """
    seq = engine._request(request_id)
    check_exportable(engine, seq)
    shape = kv_shape(engine, len(seq.prompt_ids))
    pool = engine.pool
    if out is None:
        out = torch.empty((2, *shape), dtype=pool.keys.dtype)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, *shape) or out.dtype != pool.keys.dtype:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(
            f"out must be a {pool.keys.dtype} tensor of shape {(2, *shape)} (keys, values), got {got}."
        )
    blocks = torch.tensor(seq.block_table[: shape[2]], device=pool.keys.device)
    torch.index_select(pool.keys, 2, blocks, out=out[0])  # one gather per side, straight into `out`
    torch.index_select(pool.values, 2, blocks, out=out[1])
    handoff = PrefillHandoff(
        tuple(seq.prompt_ids),
        seq.output_ids[0],
        seq.config,
        seq.eos_ids,
        seq.generator.get_state(),
        out[0],
        out[1],
        seq.arrival_s,
        seq.scheduled_s if seq.scheduled_s is not None else seq.arrival_s,
        seq.first_token_s,
        seq.n_logprobs,
        tuple(seq.logprobs),
    )
    engine.scheduler.finish(seq, Status.FINISHED)
    seq.finish_reason, seq.finish_s = "handoff", engine.clock()
    engine.release(request_id)
    return handoff


def check_handoff(engine, handoff: object) -> PrefillHandoff:
    """The hand-off, if it fits this engine's pool and context; else a ValueError naming what differs."""
    refuse_windowed(engine, "add_prefilled")
    if not isinstance(handoff, PrefillHandoff):
        raise TypeError(f"handoff must be a PrefillHandoff (export_prefill's), got {type(handoff).__name__}.")
    shape, pool = kv_shape(engine, len(handoff.prompt_ids)), engine.pool
    for name, tensor in (("keys", handoff.keys), ("values", handoff.values)):
        if tuple(tensor.shape) != shape or tensor.dtype != pool.keys.dtype:
            raise ValueError(
                f"handoff.{name} is {tuple(tensor.shape)} {tensor.dtype}; this engine's pool takes {shape} "
                f"{pool.keys.dtype} for {len(handoff.prompt_ids)} prompt tokens (the same model, block size "
                "and dtype)."
            )
    if len(handoff.prompt_ids) + handoff.config.max_new_tokens > engine.config.max_model_len:
        raise ValueError(
            f"handoff: {len(handoff.prompt_ids)} prompt + {handoff.config.max_new_tokens} new tokens exceed "
            "this "
            f"engine's max_model_len {engine.config.max_model_len}."
        )
    blocks = math.ceil((len(handoff.prompt_ids) + handoff.config.max_new_tokens) / pool.block_size)
    if blocks > pool.allocator.n_blocks:
        raise ValueError(
            f"handoff: the request needs up to {blocks} blocks; this engine's whole pool has "
            f"{pool.allocator.n_blocks}. Create it with more n_blocks."
        )
    return handoff


def has_room(engine, token_ids: list[int] | tuple[int, ...]) -> bool:
    """Whether `engine` has a free seat and the free blocks for a prefilled request of these tokens (the
    prompt and its first token) now: `add_prefilled` would seat it.

    >>> has_room(decode, [*handoff.prompt_ids, handoff.first_token])
    True
    """
    scheduler = engine.scheduler
    return scheduler.seats_used < engine.config.max_num_seqs and engine.block_manager.can_allocate(token_ids)


def add_prefilled(engine, handoff: PrefillHandoff) -> int:
    """Seat `handoff` in `engine` as a running request that feeds its first token next step; its new id.

    Raises ValueError when the engine has no free seat or too few free blocks for it right now (the caller
    keeps the hand-off and tries again after a step), or when it does not fit this engine (`check_handoff`).
    """
    check_handoff(engine, handoff)
    seq = EngineRequest(
        next(engine.request_ids),
        list(handoff.prompt_ids),
        handoff.config,
        handoff.eos_ids,
        engine.tokenizer,
        handoff.arrival_s,
        logprobs=handoff.n_logprobs,
    )
    seq.generator.set_state(handoff.generator_state)
    seq.output_ids.append(handoff.first_token)  # its text and stop-string state, replayed from the token
    text_and_finish(
        handoff.first_token, handoff.config.max_new_tokens == 1, seq.eos_ids, seq.text, seq.stopper
    )
    seq.logprobs = list(handoff.logprobs)
    scheduler, manager = engine.scheduler, engine.block_manager
    if not has_room(engine, seq.token_ids):
        raise ValueError(
            f"add_prefilled: no room now ({scheduler.seats_used} of {engine.config.max_num_seqs} seats, "
            f"{manager.allocator.n_free} free blocks, {manager.blocks_needed(seq.token_ids)} needed); "
            "step first."
        )
    manager.allocate(seq)  # blocks for prompt + first token: a cached prefix shared, the rest fresh
    hit = seq.num_cached_tokens // manager.block_size  # leading blocks already in this pool: not copied
    n_blocks = handoff.keys.shape[2]
    if hit < n_blocks:
        pool, targets = (
            engine.pool,
            torch.tensor(seq.block_table[hit:n_blocks], device=engine.pool.keys.device),
        )
        pool.keys[:, :, targets] = handoff.keys[:, :, hit:]  # the one copy into this engine's pool
        pool.values[:, :, targets] = handoff.values[:, :, hit:]
    seq.num_cached_tokens = len(seq.prompt_ids)
    manager.publish(seq, len(seq.prompt_ids))  # the prompt's full blocks, named for the prefix cache
    seq.status, seq.scheduled_s, seq.first_token_s = (
        Status.RUNNING,
        handoff.scheduled_s,
        handoff.first_token_s,
    )
    scheduler.running.append(seq)
    engine.requests[seq.request_id] = seq
    return seq.request_id
