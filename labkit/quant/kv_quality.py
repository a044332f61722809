"""What a quantized KV cache costs in quality: the same text read through a float cache and through int8,
int4 and int4-rot ones (notebook 15).

Teacher-forced: the model reads the text's own tokens (not its guesses), in chunks through each cache, so
every cache sees the same inputs and the run is deterministic. At every position, against the next token
of the text and against the float cache's next-token distribution p:

    perplexity       exp(mean -log q(next token)): how well the text is predicted (lower is better)
    top-1 agreement  the share of positions whose most likely token is the float cache's
    KL               mean KL(p || q) in nats: how far the whole distribution moved

    >>> print(kv_quality(model, tokenizer, eval_text(), max_tokens=256))   # SmolLM2, data/eval's text
    256 tokens, teacher-forced
    KV cache  bytes/token  x float32  perplexity  top-1 agree  KL (nats)
    float32        46,080      1.000      25.083       100.0%    0.00000
    int8           11,880      0.258      25.117        98.4%    0.00073
    int4            7,200      0.156      25.762        83.9%    0.06013
    int4-rot        7,200      0.156      25.453        87.5%    0.04074

    >>> print(kv_quality(model, tokenizer, eval_text(), max_tokens=1024))
    1024 tokens, teacher-forced
    KV cache  bytes/token  x float32  perplexity  top-1 agree  KL (nats)
    float32        46,080      1.000      31.673       100.0%    0.00000
    int8           11,880      0.258      31.710        98.2%    0.00061
    int4            7,200      0.156      33.546        85.4%    0.05015
    int4-rot        7,200      0.156      32.838        89.2%    0.03450

    >>> print(kv_quality(model, tokenizer, eval_text(), max_tokens=None))   # the whole text
    3674 tokens, teacher-forced
    KV cache  bytes/token  x float32  perplexity  top-1 agree  KL (nats)
    float32        46,080      1.000      15.441       100.0%    0.00000
    int8           11,880      0.258      15.450        98.5%    0.00057
    int4            7,200      0.156      16.185        88.1%    0.04367
    int4-rot        7,200      0.156      16.124        90.4%    0.03418

At long context, over Python's own documentation (`labkit.models.long_text`, float32 perplexity / top-1
agreement / KL; 247 s and 440 s on the same machine, under load):

    tokens   float32   int8                       int4                        int4-rot
     4,096    10.834   10.845 / 98.8 % / 0.00079   11.609 / 87.9 % / 0.06106   11.397 / 89.7 % / 0.04352
     8,192    10.268   10.281 / 98.7 % / 0.00083   11.035 / 88.2 % / 0.06402   10.850 / 89.1 % / 0.04694

    >>> kv_quality(model, tokenizer, long_text(), max_tokens=8192, chunk=512)

Rotating before quantizing (int4-rot) cuts int4's KL by 22-32 % at int4's bytes from 256 to 8,192 tokens,
and its perplexity excess over float32 from 2.7-7.5 % to 1.5-5.7 %; int8 stays within 0.2 %. The loss does
not grow steadily with the context: int4's KL stays within 0.044-0.064 from 256 tokens to 8,192. A 4-bit cache's figures move with
float rounding: reading the rotated rows another way, equal in exact arithmetic (each row rotated back
instead of the query and output rotated), gave int4-rot KL 0.03530 / 0.03248 / 0.03405, since a rounding
flips a few codes in later layers. Measured on SmolLM2-135M float32 (labkit's Llama) on a 2-core AMD EPYC
(AVX2), idle, two torch threads: the three tables took 5.2 s, about 20 s and 73 s. The numbers are the
model's, not the machine's, up to that rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.doors import check_tokenizer
from labkit.core.forward import as_llama, forward
from labkit.core.text import encode_prompt
from labkit.quant.quantized_kv import KV_DTYPES, kv_bytes_per_token, new_kv_cache
from labkit.table import Column, format_table


@dataclass(frozen=True)
class KVQualityRow:
    """One cache kind read over the text."""

    kv_dtype: str  # "float32" (the model's own dtype: the reference), "int8", "int4", "int4-rot"; or
    # llama.cpp's type names, "f32" (its reference), "q8_0", ... (labkit.engines.llama_kv)
    bytes_per_token: int  # KV bytes one more token of context costs (batch 1; scales and minimums counted)
    ratio_to_float32: float  # bytes_per_token over a float32 cache's
    nll: float  # mean negative log-likelihood of the text's next token, nats per token
    top1_agreement: float  # share of positions whose argmax equals the reference cache's
    kl: float  # mean KL(reference || this) of the next-token distributions, nats

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll)


@dataclass(frozen=True)
class KVQuality:
    """The rows of `kv_quality` (or of llama.cpp's `llama_kv_quality`), the reference first; `print` shows
    them as a table."""

    n_tokens: int  # tokens of text read (n_tokens - 1 positions scored)
    rows: tuple[KVQualityRow, ...]
    source: str = ""  # who read it, when not labkit: "llama.cpp, 256 tokens a batch"

    def row(self, kv_dtype: str) -> KVQualityRow:
        """The row of one cache kind ("float32", "int8", "int4", "int4-rot")."""
        found = [row for row in self.rows if row.kv_dtype == kv_dtype]
        if not found:
            raise KeyError(f"No row {kv_dtype!r}; the rows are {[row.kv_dtype for row in self.rows]}.")
        return found[0]

    def table(self) -> str:
        names = [row.kv_dtype for row in self.rows]
        ratio = f"x {names[0]}"  # bytes against the reference's
        columns = [
            Column("KV cache", max(8, *map(len, names)), align="<"),
            Column("bytes/token", 13, ",d"),
            Column(ratio, max(7, len(ratio) + 2), ".3f"),
            Column("perplexity", 12, ".3f"),
            Column("top-1 agree", 13, ".1%"),
            Column("KL (nats)", 11, ".5f"),
        ]
        cells = [
            [r.kv_dtype, r.bytes_per_token, r.ratio_to_float32, r.perplexity, r.top1_agreement, r.kl]
            for r in self.rows
        ]
        head = f"{self.n_tokens} tokens, teacher-forced" + (f", {self.source}" if self.source else "")
        return head + "\n" + format_table(columns, cells)

    def __str__(self) -> str:
        return self.table()


@dataclass
class Totals:
    """Sums over the positions scored so far: -log q(next token), argmax agreements, KL(p || q)."""

    nll: float = 0.0
    agree: int = 0
    kl: float = 0.0

    def add(self, p: torch.Tensor, q: torch.Tensor, targets: torch.Tensor) -> None:
        """Count positions scored: p, q next-token log-probabilities [n, V] (p the reference's), targets
        [n, 1] the text's next tokens."""
        self.nll -= float(q.gather(1, targets).sum())
        self.agree += int((q.argmax(-1) == p.argmax(-1)).sum())
        self.kl += float((p.exp() * (p - q)).sum())


def kv_quality(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    text: str,
    kv_dtypes: tuple[str, ...] = tuple(KV_DTYPES),  # the quantized kinds beside the reference
    max_tokens: int | None = 256,
    chunk: int = 256,
) -> KVQuality:
    """Read `text` (its first max_tokens tokens; None: all that fits the context) through a cache in the
    model's own dtype and through one of each `kv_dtypes`, `chunk` tokens a forward pass; compare them.

    model: labkit's Llama, or a transformers Llama (run as labkit's Llama on the same weights).

        >>> kv_quality(model, tokenizer, eval_text(), max_tokens=256).row("int8").top1_agreement
        0.984...
    """
    llama = as_llama(model)
    check_tokenizer("tokenizer", tokenizer)
    if not isinstance(text, str):
        raise TypeError(f"text must be a string to read, got {type(text).__name__}.")
    if not isinstance(kv_dtypes, tuple) or not all(isinstance(k, str) and k in KV_DTYPES for k in kv_dtypes):
        raise ValueError(f"kv_dtypes must be a tuple of names from {tuple(KV_DTYPES)}, got {kv_dtypes!r}.")
    context = llama.config.max_position_embeddings
    check_int("max_tokens", context if max_tokens is None else max_tokens, minimum=2, maximum=context)
    check_int("chunk", chunk, minimum=1)
    ids = encode_prompt(tokenizer, text)[: max_tokens or context]
    if len(ids) < 2:
        raise ValueError(f"text must have at least 2 tokens (one to read, one to predict), got {len(ids)}.")
    reference = str(llama.embed_tokens.weight.dtype).removeprefix("torch.")
    kinds = {reference: None, **{kind: kind for kind in kv_dtypes}}
    caches = {name: new_kv_cache(llama, 1, len(ids), kind) for name, kind in kinds.items()}
    totals = {name: Totals() for name in kinds}
    ids = torch.tensor([ids], device=llama.device)
    for start in range(0, ids.shape[1] - 1, chunk):
        inputs = ids[:, start : min(start + chunk, ids.shape[1] - 1)]
        targets = ids[0, start + 1 : start + 1 + inputs.shape[1], None]  # [n, 1]: each position's next token
        p = F.log_softmax(forward(llama, inputs, caches[reference])[0], dim=-1)  # [n, V]
        for name in kinds:
            q = p if name == reference else F.log_softmax(forward(llama, inputs, caches[name])[0], dim=-1)
            totals[name].add(p, q, targets)
    return _quality_of(llama, ids.shape[1], totals)


def _quality_of(llama: torch.nn.Module, n_tokens: int, totals: dict[str, Totals]) -> KVQuality:
    c, positions = llama.config, n_tokens - 1
    shape = (c.n_layers, c.n_kv_heads, c.head_dim)
    float32_bytes = kv_bytes_per_token("float32", *shape)
    rows = []
    for name, total in totals.items():
        size = kv_bytes_per_token(name, *shape)
        means = (total.nll / positions, total.agree / positions, total.kl / positions)
        rows.append(KVQualityRow(name, size, size / float32_bytes, *means))
    return KVQuality(n_tokens, tuple(rows))
