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
