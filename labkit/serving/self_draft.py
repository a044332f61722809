"""Early-exit self-drafts inside the serving engine (notebook 09's `early_exit_drafter`; LayerSkip's
self-speculation): the draft is the target's own first `exit_layer` blocks, then its final norm and its head.

The draft keeps no cache of its own. Its keys and values over a request's past are the target's own in
those layers (the same tokens through the same weights), and they are in the engine's pool already. So to
draft for a request, `EarlyExitDraft.propose` gathers the first `exit_layer` layers' keys and values at the
request's cached slots into a small KVCache [exit_layer, 1, H, S + k, D], feeds its pending token, then
each draft token, greedily (the argmax of the draft's logits), k times. Nothing is written to the pool: the
batched verification pass writes every layer's keys of the tokens it feeds, as for prompt lookup's drafts,
and the engine's accept/resample rule (a point mass on each draft token) keeps greedy output equal to
`generate` and sampled output on the target's distribution, whatever the draft proposes.

Unlike prompt lookup, a draft token costs a forward pass of `exit_layer` layers and the head, one row at a
time: `seconds_per_token` (a moving average of the measured ones) is what the adaptive draft length weighs
against the tokens a draft saves.

SmolLM2's first layers were never trained to predict, and they rarely guess right. Measured (SmolLM2-135M
float32, eager engine, one request, 48 greedy tokens, median of 3 runs taken in turns, 2 torch threads,
2-core AMD EPYC with AVX-512, nothing else running): with 2 drafts a step at exit layers 4, 8 and 15 of 30,
2-9 % of the draft tokens were kept, and the request ran 0.37-0.45x as fast as without drafts (notebook
09's plain loop: 0.36-0.42x); adaptive (at most 4), the drafts stayed off, 1.04x on a copy and 0.96x on free
text, both within the noise between runs, where prompt lookup ran the copy 2.61x.

    >>> draft = EarlyExitDraft(model, engine.pool, exit_layer=8)
    >>> draft.propose(seq, 3)          # three draft tokens after seq's pending one, e.g. (13, 28, 2)
"""

from __future__ import annotations

import torch

from labkit.core.arguments import check_int
from labkit.core.kv_cache import KVCache
from labkit.core.paged import BlockPool
from labkit.serving.compiled_step import read_slots
from labkit.serving.request import EngineRequest
from labkit.speculative.drafters import early_exit_model
from labkit.timing import clock

COST_WEIGHT = 0.25  # weight of each new measurement in seconds_per_token's moving average


class EarlyExitDraft:
    """Greedy drafts of the target's first `exit_layer` layers, reading their past from the engine's pool.

    model: the engine's labkit Llama (its layers are shared, not copied); pool: the engine's BlockPool,
    keys and values [L, H, n_blocks, block_size, D].
    """

    def __init__(self, model: torch.nn.Module, pool: BlockPool, exit_layer: int):
        n_layers = model.config.n_layers
        check_int("exit_layer", exit_layer, minimum=1, maximum=n_layers - 1, note="layers the draft runs")
        self.draft, self.pool, self.exit_layer = early_exit_model(model, exit_layer), pool, exit_layer
        self.n_layers = n_layers
        self.seconds_per_token = 0.0  # measured; 0 until the first draft

    def past(self, seq: EngineRequest, room: int) -> KVCache:
        """A KVCache of the draft's layers holding seq's cached tokens' keys and values from the pool, with
        room for `room` more tokens: keys [exit_layer, 1, H, cached + room, D]."""
        keys, values = self.pool.keys, self.pool.values  # [L, H, N, B, D]
        _, heads, n_blocks, block_size, dim = keys.shape
        cached = seq.num_cached_tokens
        slots = read_slots([seq.block_table], torch.tensor([cached]), cached, block_size)[0]  # [cached]
        cache = KVCache(self.exit_layer, 1, heads, cached + room, dim, keys.dtype, keys.device)
        for pooled, dense in ((keys, cache.keys), (values, cache.values)):
            flat = pooled[: self.exit_layer].reshape(self.exit_layer, heads, n_blocks * block_size, dim)
            dense[:, 0, :, :cached] = flat.index_select(2, slots)
        cache.length = cached
        return cache

    @torch.inference_mode()
    def propose(self, seq: EngineRequest, k: int) -> tuple[int, ...]:
        """k greedy draft tokens after seq's pending one (its tokens not yet cached, fed first)."""
        if k <= 0:
            return ()
        start = clock()
        fed = seq.token_ids[seq.num_cached_tokens :]  # the pending token (a preempted one: all it lost)
        cache = self.past(seq, len(fed) + k)
        ids, draft = torch.tensor([fed]), []
        for _ in range(k):
            logits = self.draft(ids, cache)  # [1, T, V]
            draft.append(int(logits[0, -1].argmax()))
            ids = torch.tensor([[draft[-1]]])
        seconds = (clock() - start) / k
        weight = COST_WEIGHT if self.seconds_per_token else 1.0
        self.seconds_per_token += weight * (seconds - self.seconds_per_token)
        return tuple(draft)
