"""A KV cache that stores keys and values as small integer codes with their scales (notebook 15).

At long context the cache, not the weights, is what a decode step reads: SmolLM2's float32 KV costs
46 kB a token (2 x 30 layers x 3 heads x 64 x 4 bytes), 377 MB at 8k tokens. Engines store it in fewer
bits (vLLM's `--kv-cache-dtype`, llama.cpp's `-ctk / -ctv q8_0, q4_1`). Each token's key (and value) of
each head, a row of head_dim numbers, is quantized on its own when it is appended, with the group-wise
scheme of `labkit.quant.schemes` (float16 scales, rounded so every error stays within half a step):

    kv_dtype  groups along head_dim          stored per row of 64       value of code q    like
    int8      one, symmetric (absmax)        64 codes + a scale         (q - 128) * s      q8_0 per row
    int4      of 32, asymmetric (min, max)   32 bytes + 2 x (s, m)      q * s + m          q4_1
    int4-rot  as int4, of the row x H        as int4                    (q * s + m) H      q4_1, rotated

int4-rot first multiplies each row by the normalized Hadamard matrix H [head_dim, head_dim]
(`labkit.quant.hadamard`: orthogonal and its own inverse), so a channel with large values spreads over the
whole row and no longer sets one group's step alone. Its rows stay rotated on read: the cache's own `attend`
rotates the query and the output instead, once each, since a rotation keeps every dot product. H is one shared
matrix, made from head_dim alone and not stored per token: int4-rot costs int4's bytes per token.

Codes are dequantized on read: `append` returns float keys and values, so attention runs unchanged. A row's
codes depend on that row alone, so a prompt prefilled at once sees the same keys as one fed token by token.
`labkit.quant.kv_quality` measures what each kind costs in quality.

    >>> cache = new_kv_cache(model, max_length=256, kv_dtype="int8")   # where model.new_cache(1, 256) goes
    >>> logits, cache = prefill(model, prompt_ids, cache)
    >>> cache.bytes_per_token(), cache.ratio_to_float32()
    (11880, 0.2578125)
"""

from __future__ import annotations

import torch

from labkit.core.arguments import check_choice, check_int
from labkit.core.attention import attention
from labkit.core.doors import check_record
from labkit.core.kv_cache import KVCache, StoredTokens, check_reorder_indices
from labkit.models.footprint import KV_GROUP_SIZE, kv_row_bytes
from labkit.quant.hadamard import hadamard, is_power_of_two
from labkit.quant.schemes import GroupQuantized, dequantize_groupwise, quantize_groupwise

KV_DTYPES = {  # what each kind stores per row (one token, one head), as GGUF's block formats name it
    "int8": "8-bit codes, one float16 scale per token and head (symmetric, like q8_0 over a whole row)",
    "int4": "4-bit codes in groups of 32 along head_dim, a float16 scale and minimum each (like q4_1)",
    "int4-rot": "int4 of each row times the normalized Hadamard matrix (QuaRot); the matrix is shared",
}
ROTATED = ("int4-rot",)  # the kinds that store x H instead of x (head_dim a power of two)
FLOAT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}  # an unquantized cache's bytes per number


def kv_group_size(kv_dtype: str, head_dim: int) -> int:
    """Values per scale: the whole row for int8; 32 for int4 (all of head_dim when it is shorter)."""
    return head_dim if kv_dtype == "int8" else min(KV_GROUP_SIZE, head_dim)


def kv_bytes_per_token(
    kv_dtype: str, n_layers: int, n_kv_heads: int, head_dim: int, batch_size: int = 1
) -> int:
    """Bytes one more token of context costs, scales and minimums counted: 2 (K and V) x layers x B x
    heads x the bytes of one row of head_dim numbers.

        >>> [kv_bytes_per_token(kind, 30, 3, 64) for kind in ("float32", "int8", "int4", "int4-rot")]
        [46080, 11880, 7200, 7200]
    """
    check_choice("kv_dtype", kv_dtype, (*FLOAT_BYTES, *KV_DTYPES))
    return int(2 * n_layers * batch_size * n_kv_heads * kv_row_bytes(kv_dtype, head_dim))


def check_kv_head_dim(kv_dtype: str, head_dim: int) -> None:
    """A ValueError when head_dim does not split into kv_dtype's groups (int4: 32, two codes a byte) or,
    for a rotated kind, is not a power of two (Sylvester's Hadamard matrix has no other sizes)."""
    group_size = kv_group_size(kv_dtype, head_dim)
    if head_dim % group_size or (kv_dtype != "int8" and head_dim % 2):
        raise ValueError(
            f"{kv_dtype} quantizes head_dim in groups of {KV_GROUP_SIZE} (or all of it when shorter), "
            f"two codes a byte; head_dim={head_dim} does not split so. Use kv_dtype='int8'."
        )
    if kv_dtype in ROTATED and not is_power_of_two(head_dim):
        raise ValueError(
            f"{kv_dtype} rotates each row by a Hadamard matrix, whose size is a power of two (32, 64, 128); "
            f"head_dim={head_dim} is not one. Use kv_dtype='int4'."
        )


class QuantizedRows:
    """Rows of `width` numbers of every layer, [n_layers, batch, heads, max_length, width], kept as codes
    with float16 scales (and minimums), written and read by position; with a `rotation` H [width, width]
    (orthogonal, H H = I), the codes are those of x H and a read multiplies by H again."""

    def __init__(
        self,
        shape: tuple[int, ...],
        bits: int,
        group_size: int,
        symmetric: bool,
        device,
        rotation: torch.Tensor | None = None,
    ):
        *outer, width = shape
        self.bits, self.group_size, self.width, self.rotation = bits, group_size, width, rotation
        code_width = width // 2 if bits == 4 else width  # two 4-bit codes per byte
        groups = width // group_size
        self.codes = torch.zeros((*outer, code_width), dtype=torch.uint8, device=device)
        self.scales = torch.zeros((*outer, groups), dtype=torch.float16, device=device)
        self.minimums = None if symmetric else torch.zeros_like(self.scales)

    def tensors(self) -> list[torch.Tensor]:
        return [self.codes, self.scales] + ([] if self.minimums is None else [self.minimums])

    def write(self, layer: int, start: int, x: torch.Tensor) -> None:
        """Quantize x [B, H, T, width] into positions start..start+T of `layer`."""
        batch, heads, tokens, width = x.shape
        rows = x.reshape(-1, width).float()
        if self.rotation is not None:  # QuaRot (Ashkboos et al. 2024): quantize x H, the outliers spread
            # in float64, rounded once: a row's codes stay its own whatever rows a matmul groups it with
            rows = (rows.double() @ self.rotation.double()).float()
        q = quantize_groupwise(rows, self.bits, self.group_size, symmetric=self.minimums is None)
        end = start + tokens
        self.codes[layer, :, :, start:end] = q.codes.reshape(batch, heads, tokens, -1)
        self.scales[layer, :, :, start:end] = q.scales.reshape(batch, heads, tokens, -1)
        if self.minimums is not None:
            self.minimums[layer, :, :, start:end] = q.minimums.reshape(batch, heads, tokens, -1)

    def read(self, layer: int, end: int, unrotate: bool = True) -> torch.Tensor:
        """Positions 0..end of `layer`, dequantized: float32 [B, H, end, width]; a rotated kind's rows stay
        rotated (x H) with unrotate=False."""
        batch, heads = self.codes.shape[1:3]
        rows = batch * heads * end

        def flat(t):
            return None if t is None else t[layer, :, :, :end].reshape(rows, -1)  # a copy: slices are strided

        q = GroupQuantized(
            codes=flat(self.codes),
            scales=flat(self.scales),
            minimums=flat(self.minimums),
            shape=(rows, self.width),
            bits=self.bits,
            group_size=self.group_size,
        )
        restored = dequantize_groupwise(q)
        if self.rotation is not None and unrotate:
            restored = restored @ self.rotation  # (x H) H = x: H is symmetric and orthogonal
        return restored.view(batch, heads, end, self.width)

    def reorder(self, indices: torch.Tensor) -> None:
        """Row i of the batch now holds what row indices[i] held."""
        self.codes = self.codes.index_select(1, indices)
        self.scales = self.scales.index_select(1, indices)
        if self.minimums is not None:
            self.minimums = self.minimums.index_select(1, indices)


class QuantizedKVCache(StoredTokens):
    """Keys and values quantized per token and head (int8) or per group of 32 (int4, int4-rot: of the row
    rotated by a Hadamard matrix), dequantized on read.

    The members of `labkit.core.kv_cache.Cache`, as `KVCache` has them, so it goes wherever a KVCache goes
    (`prefill`, `decode_step`, `generate(..., cache=...)`, `greedy_decode`, `reorder`, `crop`).

        >>> cache = QuantizedKVCache(n_layers=30, batch_size=1, n_kv_heads=3, max_length=512, head_dim=64)
        >>> cache.bytes_per_token(), cache.ratio_to_float32()
        (11880, 0.2578125)
    """

    def __init__(
        self,
        n_layers: int,
        batch_size: int,
        n_kv_heads: int,
        max_length: int,
        head_dim: int,
        kv_dtype: str = "int8",
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        check_int("batch_size", batch_size, minimum=1)
        check_int("max_length", max_length, minimum=1, note="room for the prompt plus the new tokens")
        check_choice("kv_dtype", kv_dtype, tuple(KV_DTYPES))
        check_kv_head_dim(kv_dtype, head_dim)
        shape = (n_layers, batch_size, n_kv_heads, max_length, head_dim)
        bits, symmetric = (8, True) if kv_dtype == "int8" else (4, False)
        group_size = kv_group_size(kv_dtype, head_dim)
        rotation = hadamard(head_dim, device=device) if kv_dtype in ROTATED else None  # shared by all rows
        self.rotation = rotation  # H [head_dim, head_dim] of a rotated kind, else None
        self.keys = QuantizedRows(shape, bits, group_size, symmetric, device, rotation)
        self.values = QuantizedRows(shape, bits, group_size, symmetric, device, rotation)
        self.kv_dtype, self.dtype, self.shape = kv_dtype, dtype, shape
        self.length = 0  # tokens stored so far (the same for every layer once a forward pass ends)

    @classmethod
    def for_model(
        cls,
        model: torch.nn.Module,
        batch_size: int = 1,
        max_length: int | None = None,
        kv_dtype: str = "int8",
    ) -> QuantizedKVCache:
        """An empty quantized cache sized for labkit's model (default: its whole context), as `model.new_cache`."""
        check_labkit_model(model)
        c = model.config
        context = c.max_position_embeddings
        max_length = context if max_length is None else max_length
        check_int("max_length", max_length, minimum=1, maximum=context, note="the model's context")
        weight = model.embed_tokens.weight
        return cls(
            c.n_layers,
            batch_size,
            c.n_kv_heads,
            max_length,
            c.head_dim,
            kv_dtype,
            weight.dtype,
            weight.device,
        )

    @property
    def max_length(self) -> int:
        return self.shape[3]

    @property
    def batch_size(self) -> int:
        return self.shape[1]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Quantize k, v [B, n_kv_heads, T, D] after the cached tokens; return all of them dequantized
        [B, H, length+T, D] in the model's dtype (the new tokens' too: what a later step will read). A
        rotated kind returns them rotated, k H and v H, for its own `attend` to read."""
        end = self.end_after(k)
        self.keys.write(layer, self.length, k)
        self.values.write(layer, self.length, v)
        rotated = self.rotation is not None
        keys, values = self.keys.read(layer, end, not rotated), self.values.read(layer, end, not rotated)
        return keys.to(self.dtype), values.to(self.dtype)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor,
        scale: float | None = None,
    ) -> torch.Tensor:
        """labkit's `attention` (its `scale`) over what `append` returned, q [B, heads, T, D] -> [B, heads, T, D]. For a
        rotated kind k and v are k H and v H: (q H)(k H)^T = q k^T and softmax(..) (v H) H = softmax(..) v,
        so the query is rotated once and the output once, instead of every cached row (llama.cpp's rotated
        cache does the same)."""
        return self.attend_with(attention, q, k, v, mask, scale)

    def attend_with(self, attend, q, k, v, mask: torch.Tensor, scale: float | None = None) -> torch.Tensor:
        """`attend(q, k, v, mask, scale)` over this cache's rows, a rotated kind's query rotated before it and
        its output after it (see `attend`); CodeReadingKVCache passes its kernel over the codes."""
        if self.rotation is None:
            return attend(q, k, v, mask, scale)
        rotation = self.rotation.to(q.dtype)
        return attend(q @ rotation, k, v, mask, scale) @ rotation

    def reorder(self, indices: torch.Tensor) -> None:
        """Row i now holds what row indices[i] held, indices [B] (beam search keeps its surviving beams)."""
        check_reorder_indices(indices, self.batch_size)
        self.keys.reorder(indices.to(self.keys.codes.device))
        self.values.reorder(indices.to(self.values.codes.device))

    def nbytes(self) -> int:
        """Bytes held by the codes, scales and minimums (all of max_length, used or not)."""
        return sum(t.nbytes for rows in (self.keys, self.values) for t in rows.tensors())

    def bytes_per_token(self) -> int:
        """Bytes one more token of context costs for the whole batch, scales counted (`kv_bytes_per_token`)."""
        return self.nbytes() // self.max_length

    def ratio_to_float32(self) -> float:
        """This cache's bytes per token over a float32 KVCache's of the same shape (0.258 for int8, 0.156
        for int4 and int4-rot, at head_dim 64)."""
        n_layers, batch, heads, _, head_dim = self.shape
        return self.bytes_per_token() / kv_bytes_per_token("float32", n_layers, heads, head_dim, batch)

    def used_bytes(self) -> int:
        """Bytes of the tokens stored so far (the rest of the preallocation is reserved but empty)."""
        return self.length * self.bytes_per_token()

    def __repr__(self) -> str:
        n_layers, batch, heads, max_length, head_dim = self.shape
        return (
            f"QuantizedKVCache({self.kv_dtype}, length={self.length}/{max_length}, layers={n_layers}, "
            f"batch={batch}, kv_heads={heads}, head_dim={head_dim}, {self.nbytes() / 1e6:.1f} MB, "
            f"{self.ratio_to_float32():.3f} of float32)"
        )


def check_labkit_model(model: object) -> torch.nn.Module:
    """model, if it is one of labkit's from-scratch models (they take labkit's caches); else a TypeError."""
    return check_record(
        "model",
        model,
        "labkit's from-scratch model (load it with impl='labkit'): a transformers model keeps its own cache",
        of=torch.nn.Module,
        has=("new_cache", "embed_tokens"),
    )


def new_kv_cache(
    model: torch.nn.Module, batch_size: int = 1, max_length: int | None = None, kv_dtype: str | None = None
) -> KVCache | QuantizedKVCache:
    """An empty cache for labkit's model: `model.new_cache` in the model's own dtype (kv_dtype None), or
    a QuantizedKVCache storing "int8", "int4" or "int4-rot" codes.

        >>> new_kv_cache(model, max_length=64, kv_dtype="int4")
        QuantizedKVCache(int4, length=0/64, layers=30, ...)
    """
    check_labkit_model(model)
    if kv_dtype is None:
        return model.new_cache(batch_size, max_length)
    check_choice("kv_dtype", kv_dtype, tuple(KV_DTYPES))
    return QuantizedKVCache.for_model(model, batch_size, max_length, kv_dtype)
