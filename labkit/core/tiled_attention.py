"""Attention in tiles (notebook 15): FlashAttention's idea on a CPU, in plain torch. The keys and values are
read one tile of `tile` keys at a time and the [T, S] score matrix is never built: only one tile's scores
[B, H, T, tile] exist at once, however long the context.

The online softmax (Milakov & Gimelshein 2018; Dao et al. 2022, Algorithm 1). For every query row keep a
running max m [T, 1], a running sum l [T, 1] and an accumulator acc [T, D], all starting at -inf, 0, 0.
For the j-th tile of keys K_j [tile, D] and values V_j [tile, D]:

    S_j   = q K_j^T * scale                          [T, tile]  the only score-sized tensor
    m_new = max(m, rowmax(S_j))                      [T, 1]
    P_j   = exp(S_j - m_new)                         [T, tile]  (in place, over S_j)
    alpha = exp(m - m_new)                           [T, 1]     rescales what was summed under the old max
    l     = alpha * l + rowsum(P_j)                  [T, 1]
    acc   = alpha * acc + P_j V_j                    [T, D]
    m     = m_new

and at the end out = acc / l, which is exactly softmax(q K^T * scale) V: every exp(s - m) in l and acc has
been brought to the same final max. Causal and sliding-window masks are applied tile by tile (a masked score
is -inf, so its P is 0); tiles that no query can see (older than every query's window) are skipped.

FlashAttention also tiles the queries (its outer loop): with `query_tile`, each block of that many queries
runs the loop above on its own, so the score tile is [query_tile, tile] whatever T is, and under a causal
mask a block reads only the keys up to its last query: a whole prompt's prefill reads about half the
(query block, key tile) pairs, the tiles above the diagonal never being touched.

    >>> q = torch.randn(1, 9, 100, 64)                  # [B, heads, T, D]: 100 new tokens
    >>> k = v = torch.randn(1, 3, 1000, 64)            # [B, kv_heads, S, D]: 1000 keys, the last 100 new
    >>> out = tiled_attention(q, k, v, tile=64)         # [1, 9, 100, 64], as labkit's `attention`
    >>> run = attend_in_tiles(q, k, v, tile=64)
    >>> run.score_bytes, run.full_score_bytes           # one tile's scores vs the [T, S] matrix, float32
    (230400, 3600000)
    >>> prompt = attend_in_tiles(*(torch.randn(1, 9, 1024, 64) for _ in range(3)), tile=64, query_tile=64)
    >>> prompt.tiles, prompt.skipped                    # 16 x 16 pairs: the diagonal and below are read
    (136, 120)

Queries sit at the END of the keys, as in a decode step with a cache: query i is at position S - T + i.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from labkit.core.arguments import InvalidArgument, check_int
from labkit.core.doors import check_number, check_tensor, described


@dataclass(frozen=True)
class TiledAttention:
    """One run of `attend_in_tiles`: its output and what it held.

    >>> run = attend_in_tiles(q, k, v, tile=64)
    >>> f"{run.saved:.0f}x less score memory"
    '16x less score memory'
    """

    out: torch.Tensor  # [B, heads, T, D] softmax(q k^T * scale) v, in q's dtype
    score_bytes: int  # the largest score tile the loop held, [B, heads, query tile, tile] float32, measured
    full_score_bytes: int  # the plain computation's [B, heads, T, S] float32 score matrix
    tiles: int  # tiles of keys read (by every block of queries)
    skipped: int  # tiles left unread: no query of the block could see any of their keys (a window, causality)

    @property
    def saved(self) -> float:
        """How many times less score memory the tiles held than the full matrix (1.0 when none was held)."""
        return self.full_score_bytes / self.score_bytes if self.score_bytes else 1.0


@dataclass
class Running:
    """The online softmax's running state, one row per query: max m and sum l [B, H_kv, G, T, 1], and the
    rescaled accumulator acc [B, H_kv, G, T, D] (G = heads / kv_heads query heads share a key head)."""

    m: torch.Tensor
    l: torch.Tensor  # noqa: E741  (the papers' name)
    acc: torch.Tensor


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    tile: int = 64,
    query_tile: int | None = None,
    causal: bool = True,
    window: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v computed one tile of keys at a time (the module's docstring).

    q [B, heads, T, D]; k, v [B, kv_heads, S, D] with heads a multiple of kv_heads (grouped-query
    attention) and S >= T when causal; queries at the end of the keys. query_tile: queries per block (None:
    all T at once). window: a query sees at most that many most recent keys, itself included (needs
    causal). scale: 1 / sqrt(D) unless given. -> [B, heads, T, D]

        >>> tiled_attention(q, k, v, tile=32, window=512).shape
        torch.Size([1, 9, 100, 64])
    """
    return attend_in_tiles(
        q, k, v, tile=tile, query_tile=query_tile, causal=causal, window=window, scale=scale
    ).out


def attend_in_tiles(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    tile: int = 64,
    query_tile: int | None = None,
    causal: bool = True,
    window: int | None = None,
    scale: float | None = None,
) -> TiledAttention:
    """`tiled_attention`, with what the loop held: the output, the bytes of the largest score tile it
    created beside the [B, heads, T, S] matrix plain attention builds, and the tiles read and skipped.

        >>> attend_in_tiles(q, k, v, tile=64).saved     # T=100, S=1000: 1000 / 64 keys
        15.625
    """
    scale = check_tiled_inputs(q, k, v, tile, causal, window, scale)
    if query_tile is not None:
        check_int("query_tile", query_tile, minimum=1, note="queries per block, or None: all at once")
    batch, heads, new_tokens, head_dim = q.shape
    kv_heads, total = k.shape[1], k.shape[2]
    # query head h reads key head h // group, as repeat_interleave does in labkit's attention
    q32 = q.float().reshape(batch, kv_heads, heads // kv_heads, new_tokens, head_dim)
    k32, v32 = k.float()[:, :, None], v.float()[:, :, None]  # [B, H_kv, 1, S, D]
    rows = query_tile or new_tokens
    blocks = [
        attend_query_block(
            q32[..., i : i + rows, :], k32, v32, total - new_tokens + i, tile, causal, window, scale
        )
        for i in range(0, new_tokens, rows)
    ]
    read = sum(block.tiles for block in blocks)
    return TiledAttention(
        out=torch.cat([b.out for b in blocks], dim=3).reshape(q.shape).to(q.dtype),
        score_bytes=max(block.score_bytes for block in blocks),
        full_score_bytes=batch * heads * new_tokens * total * 4,
        tiles=read,
        skipped=len(blocks) * math.ceil(total / tile) - read,
    )


def attend_query_block(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    first_query: int,
    tile: int,
    causal: bool,
    window: int | None,
    scale: float,
) -> TiledAttention:
    """One block of queries q [B, H_kv, G, n, D] at positions first_query.. against k, v [B, H_kv, 1, S, D],
    tile by tile over the keys it can see -> its out [B, H_kv, G, n, D] (full_score_bytes and skipped 0)."""
    n, total = q.shape[3], k.shape[3]
    query_pos = torch.arange(first_query, first_query + n, device=q.device)[:, None]  # [n, 1]
    first = 0 if window is None else max(0, first_query - window + 1)  # the first query's oldest key
    end = min(total, first_query + n) if causal else total  # past the last query's newest key
    state = Running(
        m=q.new_full((*q.shape[:-1], 1), float("-inf")),
        l=q.new_zeros((*q.shape[:-1], 1)),
        acc=torch.zeros_like(q),
    )
    peak = 0
    for start in range(first, end, tile):
        stop = min(start + tile, end)
        keep = visible(query_pos, torch.arange(start, stop, device=q.device)[None, :], causal, window)
        peak = max(peak, add_tile(state, q, k[..., start:stop, :], v[..., start:stop, :], keep, scale))
    return TiledAttention(state.acc / state.l, peak, 0, math.ceil((end - first) / tile), 0)


def add_tile(
    state: Running, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor, scale: float
) -> int:
    """Fold one tile of keys k, v [B, H_kv, 1, t, D] into the running state of q [B, H_kv, G, T, D]
    (keep [T, t]: which query sees which key); -> the bytes of the one score tile it held."""
    scores = (q @ k.transpose(-2, -1)).mul_(scale)  # [B, H_kv, G, T, t]
    held = scores.nbytes
    scores.masked_fill_(~keep, float("-inf"))
    m_new = torch.maximum(state.m, scores.amax(dim=-1, keepdim=True))  # [.., T, 1]
    # a row that has seen no key yet keeps m = -inf; subtract 0 there so exp gives 0, not nan
    m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
    probs = scores.sub_(m_safe).exp_()  # P_j = exp(S_j - m_new), over the scores' own memory
    alpha = torch.exp(state.m - m_safe)  # [.., T, 1]: 0 while m was -inf
    state.l = alpha * state.l + probs.sum(dim=-1, keepdim=True)
    state.acc = alpha * state.acc + probs @ v
    state.m = m_new
    return held


def visible(query_pos: torch.Tensor, key_pos: torch.Tensor, causal: bool, window: int | None) -> torch.Tensor:
    """[T, t] bool: query at query_pos [T, 1] sees key at key_pos [1, t] (not later when causal; not
    window or more positions back when windowed)."""
    keep = torch.ones(query_pos.shape[0], key_pos.shape[1], dtype=torch.bool, device=query_pos.device)
    if causal:
        keep &= key_pos <= query_pos
    if window is not None:
        keep &= key_pos > query_pos - window
    return keep


def check_tiled_inputs(
    q: object, k: object, v: object, tile: object, causal: object, window: object, scale: object
) -> float:
    """Refuse, by name, what `tiled_attention` cannot compute; -> the scale to use."""
    for name, value in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, value, "[B, heads, T, D]", dims=4)
        if not value.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {described(value)}.")
    if k.shape != v.shape:
        raise InvalidArgument(
            f"k and v must have one shape [B, kv_heads, S, D], got {described(k)} and {described(v)}.", "v", v
        )
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise InvalidArgument(
            f"q must share k's batch size and head width [B, heads, T, D], got {described(q)} beside k "
            f"{tuple(k.shape)}.",
            "q",
            q,
        )
    if q.shape[1] % k.shape[1]:
        raise InvalidArgument(
            f"q's heads must be a multiple of k's kv_heads (grouped-query attention), got {q.shape[1]} "
            f"heads and {k.shape[1]} kv_heads.",
            "q",
            q,
        )
    if k.shape[2] < 1:
        raise InvalidArgument(f"k must hold at least one key, got {described(k)}.", "k", k)
    check_int("tile", tile, minimum=1, note="keys per tile")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {described(causal)}.")
    if window is not None:
        check_int("window", window, minimum=1, note="or None: no window")
        if not causal:
            raise InvalidArgument(
                "window needs causal=True: a window counts keys back from the query.", "window", window
            )
    if causal and k.shape[2] < q.shape[2]:
        raise InvalidArgument(
            f"causal attention needs at least as many keys as queries (queries sit at the end of the keys), "
            f"got {q.shape[2]} queries and {k.shape[2]} keys.",
            "k",
            k,
        )
    if scale is None:
        return q.shape[-1] ** -0.5
    return float(check_number("scale", scale, above=0))
