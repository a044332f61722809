"""Batch-invariant attention: each row's output the same bits, whatever rows share the call and however
the batch is padded or packed (the serving engine's attention; its kernel is attention_kernel.cpp).

`labkit.core.attention.attention` calls torch's fused kernel, which sums over the key axis in blocks laid
out by S, the batch's padded or packed length. A row next to a longer one, or packed after another
prompt, then gets an output that differs in its last bits (about 1e-7) from the same row alone. On a
float32 model that is invisible; on labkit's 4-bit model the next layer rounds its input to int8 (Q8_1),
a last bit can move a whole int8 step, and some layers later a greedy token. labkit's kernel sums each
query over only the keys its mask leaves visible, one after another in a fixed order.

    >>> out = row_attention(q, k, v, mask)   # q [B, H, T, D], k, v [B, H_kv, S, D], mask [T, S] or [B, 1, T, S]
    >>> torch.equal(row_attention(q[:1], k[:1, :, :5], v[:1, :, :5], mask[:1, ..., :5]), out[:1])
    True                                      # row 0 alone, its keys unpadded: the same bits

`paged_row_attention` is the same attention for a compiled decode step (labkit.serving.compiled_step):
each row's past keys and values are read in place from one layer of the engine's block pool, at the row's
slots, and its new tokens' keys come after them. Its output is the same bits as `row_attention` on the
gathered keys; it only skips the copy.

Where the kernel cannot run (it failed to build, a GPU tensor, head_dim not a multiple of 16), it falls
back to `attention`, which is correct but not batch-invariant.
"""

from __future__ import annotations

import torch

from labkit.core.attention import attention, check_attention_inputs
from labkit.fast.kernel import load_kernel

LANES = 16  # the kernel's vector width: head_dim must be a multiple of it


def runs_on_kernel(q: torch.Tensor) -> bool:
    """Whether row_attention runs labkit's kernel for q [B, H, T, D] (else torch's fused attention)."""
    return q.device.type == "cpu" and q.shape[-1] % LANES == 0 and load_kernel().available


def row_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v, batch-invariant (module doc); scale 1 / sqrt(D) unless given; shapes
    as `attention`'s, out [B, H, T, D] in q's dtype. The kernel computes in float32."""
    check_attention_inputs(q, k, v, mask)
    if not runs_on_kernel(q):
        return attention(q, k, v, mask, scale)
    batch, _, tokens, head_dim = q.shape
    full_mask = (mask if mask.dim() == 4 else mask[None, None]).float().expand(batch, 1, tokens, k.shape[-2])
    out = torch.ops.labkit.row_attention(
        q.float(),
        k.float(),
        v.float(),
        full_mask,
        head_dim**-0.5 if scale is None else scale,
        load_kernel().path,
    )
    return out.to(q.dtype)


def paged_row_attention(
    q: torch.Tensor,
    pool_keys: torch.Tensor,
    pool_values: torch.Tensor,
    read_slots: torch.Tensor,
    new_keys: torch.Tensor,
    new_values: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """row_attention(q, k, v, mask) where k = row b's past keys pool_keys[:, read_slots[b]] followed by its new
    keys new_keys[b] (and v alike), without gathering the past (module doc).

    q [B, H, W, D]; pool_keys, pool_values [H_kv, slots, D] (one layer of the pool, its blocks flattened);
    read_slots [B, S] int64; new_keys, new_values [B, H_kv, W, D]; mask [B, 1, W, S + W] -> [B, H, W, D].

        >>> out = paged_row_attention(q, pool_k, pool_v, torch.tensor([[4, 9]]), k, v, torch.zeros(1, 1, 1, 3))
    """
    floats = (q, pool_keys, pool_values, new_keys, new_values)
    if runs_on_kernel(q) and all(t.dtype == torch.float32 for t in floats):
        return torch.ops.labkit.paged_row_attention(
            q,
            pool_keys,
            pool_values,
            read_slots,
            new_keys,
            new_values,
            mask,
            q.shape[-1] ** -0.5,
            load_kernel().path,
        )
    batch, length = read_slots.shape
    heads, _, dim = pool_keys.shape

    def past_then_new(pool: torch.Tensor, new: torch.Tensor) -> torch.Tensor:  # [B, H_kv, S + W, D]
        past = pool.index_select(1, read_slots.reshape(-1)).view(heads, batch, length, dim).transpose(0, 1)
        return torch.cat([past, new], dim=2)

    return row_attention(q, past_then_new(pool_keys, new_keys), past_then_new(pool_values, new_values), mask)
