"""A quantized KV cache whose decode steps attend over its codes: `CodeReadingKVCache`, opt-in beside
notebook 15's `labkit.quant.quantized_kv.QuantizedKVCache`, which it extends.

QuantizedKVCache.append dequantizes every cached row on every step, so at long context a quantized cache
decodes slower than a float one: the dequantization costs more than the bytes saved. Here a one-token step's
`append` stores the new row and returns `CodeRows` handles instead, and `attend` runs labkit's C++ kernel
`torch.ops.labkit.kv_code_attention` (kv_code_attention.cpp), which decodes each key and value row in
registers as it goes, as llama.cpp's flash-attention CPU path reads q8_0 and q4_1 blocks, each thread a chunk
of 512 keys. int4-rot's codes are read the same way, the kernel rotating the query and the output as
QuantizedKVCache.attend does. The step's new row is quantized into the cache by one C++ call too
(`torch.ops.labkit.kv_code_write`, kv_code_write.cpp: QuantizedRows.write's codes bit for bit), not by a dozen
small torch operations. The output equals the dequantize-then-attend path up to float32 rounding (measured in
tests/fast/test_code_attention.py).

Every other step (a prefill, T > 1, a model not in float32 on the CPU, labkit's kernel unavailable:
`labkit.fast.kernel.load_kernel()`'s status) runs QuantizedKVCache's own dequantizing path.

    >>> cache = CodeReadingKVCache.for_model(model, max_length=8192, kv_dtype="int8")
    >>> logits, cache = prefill(model, prompt_ids, cache)     # a prefill: dequantized, as QuantizedKVCache
    >>> decode_step(model, token, cache)                     # one token: the codes are read directly
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from labkit.fast import kernel
from labkit.quant.quantized_kv import QuantizedKVCache, QuantizedRows


@dataclass(frozen=True)
class CodeRows:
    """Positions start..end of one layer of a QuantizedRows, not dequantized: what CodeReadingKVCache.append
    returns (from 0), and `last(count)` narrows (a Gemma 3 local layer's window). `shape` is that of the float
    rows it stands for, [B, H_kv, end - start, D] (the causal mask reads shape[-2])."""

    rows: QuantizedRows
    layer: int
    end: int
    start: int = 0

    @property
    def shape(self) -> torch.Size:
        batch, heads = self.rows.codes.shape[1:3]
        return torch.Size((batch, heads, self.end - self.start, self.rows.width))

    def last(self, count: int) -> CodeRows:
        """The last `count` of these positions (labkit.core.attention.last_keys)."""
        return CodeRows(self.rows, self.layer, self.end, max(self.start, self.end - count))

    @property
    def device(self) -> torch.device:
        return self.rows.codes.device

    def parts(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The layer's codes, scales and minimums (None for int8) from position `start` on, [B, H_kv,
        max_length - start, ...] views."""
        tail = slice(self.start, None)
        minimums = None if self.rows.minimums is None else self.rows.minimums[self.layer][:, :, tail]
        return self.rows.codes[self.layer][:, :, tail], self.rows.scales[self.layer][:, :, tail], minimums


def kernel_runs(q_or_k: torch.Tensor, tokens: int) -> bool:
    """Whether a step of `tokens` new tokens in this tensor's dtype and device can read codes: one token,
    float32 on the CPU, and labkit's kernel library loaded (its status says so; nothing is built twice)."""
    if tokens != 1 or q_or_k.dtype != torch.float32 or q_or_k.device.type != "cpu":
        return False
    return kernel.load_kernel().available


def code_attention(
    q: torch.Tensor,
    keys: CodeRows,
    values: CodeRows,
    mask: torch.Tensor,
    scale: float | None = None,
    rotate: bool = False,
) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v over the codes of `keys` and `values`; q [B, H, 1, D] float32 with H a
    multiple of H_kv, mask additive [1, S], [B, S] or [B, 1, 1, S] (S = keys.shape[-2]) -> [B, H, 1, D] float32.
    scale: 1 / sqrt(D) when None. rotate: the codes are those of k H and v H (int4-rot), so the kernel
    attends with q H and returns its output times H ((q H)(k H)^T = q k^T, (p (V H)) H = p V).

        >>> out = code_attention(q, CodeRows(cache.keys, 0, 8), CodeRows(cache.values, 0, 8), mask)
    """
    batch, _, tokens, head_dim = q.shape
    if tokens != 1:
        raise ValueError(
            f"code_attention attends one query token (a decode step), got q of shape {tuple(q.shape)}"
        )
    scale = head_dim**-0.5 if scale is None else float(scale)
    keys_read = keys.shape[-2]  # end - start
    mask = mask.to(torch.float32).reshape(-1, keys_read).expand(batch, keys_read)
    k_codes, k_scales, k_minimums = keys.parts()
    v_codes, v_scales, v_minimums = values.parts()
    return torch.ops.labkit.kv_code_attention(
        q.contiguous(), k_codes, k_scales, k_minimums, v_codes, v_scales, v_minimums, mask, scale, rotate
    )


class CodeReadingKVCache(QuantizedKVCache):
    """QuantizedKVCache (same arguments, kinds, bytes and members) whose one-token steps attend over the
    codes with labkit's kernel; see the module's docstring.

        >>> cache = CodeReadingKVCache(n_layers=30, batch_size=1, n_kv_heads=3, max_length=8192, head_dim=64)
        >>> cache.append(0, k, v)   # k, v [1, 3, 1, 64], after a prefill: CodeRows handles, nothing dequantized
        (CodeRows(rows=..., layer=0, end=...), CodeRows(rows=..., layer=0, end=...))
    """

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple:
        """Quantize k, v [B, n_kv_heads, T, D] after the cached tokens; return `CodeRows` handles to all of
        them for a one-token step the kernel runs, else QuantizedKVCache.append's dequantized rows."""
        if not (self.dtype == torch.float32 and kernel_runs(k, k.shape[2])):
            return super().append(layer, k, v)
        end = self.end_after(k)
        rotate = self.rotation is not None
        for rows, x in ((self.keys, k), (self.values, v)):  # QuantizedRows.write's codes, in one call each
            codes, scales, minimums = CodeRows(rows, layer, end).parts()
            torch.ops.labkit.kv_code_write(x.contiguous(), codes, scales, minimums, self.length, rotate)
        return CodeRows(self.keys, layer, end), CodeRows(self.values, layer, end)

    def attend(self, q, k, v, mask: torch.Tensor, scale: float | None = None) -> torch.Tensor:
        """q [B, heads, T, D] -> [B, heads, T, D]: the kernel over `CodeRows` k, v (a rotated kind's query and
        output rotated inside it, as QuantizedKVCache.attend rotates them), else QuantizedKVCache.attend over
        float rows."""
        if not isinstance(k, CodeRows):
            return super().attend(q, k, v, mask, scale)
        return code_attention(q, k, v, mask, scale, rotate=self.rotation is not None)
