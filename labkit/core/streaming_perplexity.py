"""Reading a text longer than the context through a cache, and how well each part of it was predicted
(notebook 15).

Teacher-forced: the model reads the text's own tokens, `chunk` of them a forward pass, through the cache it
is given: a KVCache (everything kept, up to the trained context), a SinkKVCache (a window, with or without
attention sinks, for any length) or a QuantizedKVCache. At every position the next token's negative
log-likelihood is kept, and perplexity is reported over the whole text and over each `segment` of
positions, so a plot shows where a plain sliding window blows up (StreamingLLM, Xiao et al. 2023, fig. 3).

    >>> ids = long_text_ids(tokenizer, 4096)                         # labkit.models.long_text
    >>> read = read_long_text(model, ids, SinkKVCache.for_model(model, sinks=4, window=252))
    >>> print(read)                                                  # perplexity per 512 positions

Measured on SmolLM2-135M, float32, the first 4,096 tokens of `long_text()`, chunk 256 (so a query sees
between 256 and 512 tokens in a 256-token cache: the pass's own tokens are evicted only after it):
a plain window of 256 reads at perplexity 20.68, 4 sinks + 252 at 12.55, the full KVCache at 10.83. Per
512 positions, from the first eviction on (position 512), the plain window is 1.8-2.6x the full cache's
perplexity, the sinks 1.04-1.40x. Over 20,000 tokens (past the trained 8,192) with 1,024 kept: plain window
16.70, 4 sinks + 1,020 window 10.40 (the full KVCache reads the first 8,192 at 10.27). Gemma-3-270M, float32,
the first 2,048 tokens, the same caches (idle 2-core AMD EPYC): plain window 16.48, 4 sinks + 252 window
12.93, the full KVCache 11.58; over positions 1,536-2,046, 22.28, 16.97 and 12.00. Its local layers see at
most 512 keys anyway, yet its 3 global layers still lean on the first tokens.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from labkit.core.arguments import check_int
from labkit.core.doors import check_record, check_tensor
from labkit.core.forward import as_llama
from labkit.core.gemma3 import Gemma3
from labkit.core.sink_cache import SinkKVCache
from labkit.table import Column, format_table


@dataclass(frozen=True)
class LongRead:
    """What `read_long_text` measured; `print` shows the perplexity of each segment."""

    label: str  # the cache read through: "KVCache", "SinkKVCache 4 sinks + 252 window", ...
    n_tokens: int  # tokens read (n_tokens - 1 positions scored: the last has no next token)
    segment: int  # scored positions per segment
    perplexity: float  # exp(mean negative log-likelihood) over every scored position
    segment_perplexities: tuple[float, ...]  # the same over positions [i*segment, (i+1)*segment), in order
    seconds: float  # wall-clock time of the whole read, loss included
    max_cache_length: int  # most tokens the cache held after a forward pass

    @property
    def segment_starts(self) -> tuple[int, ...]:
        """The first position of each segment (x of a plot of segment_perplexities)."""
        return tuple(range(0, self.n_tokens - 1, self.segment))

    def table(self) -> str:
        return reads_table([self])

    def __str__(self) -> str:
        return self.table()


def cache_label(cache: object) -> str:
    """A short name for a cache: its class, and for a SinkKVCache its sinks and window.

    >>> cache_label(SinkKVCache(2, 1, 8, sinks=4, window=252))
    'SinkKVCache 4 sinks + 252 window'
    """
    if isinstance(cache, SinkKVCache):
        return f"SinkKVCache {cache.sinks} sinks + {cache.window} window"
    return type(cache).__name__


def check_fits(cache: object, n_tokens: int, chunk: int, context: int) -> None:
    """A ValueError, before any work, when n_tokens cannot be read through `cache` in passes of `chunk`."""
    if isinstance(cache, SinkKVCache):
        if chunk > cache.chunk:
            raise ValueError(
                f"chunk={chunk} is more than this SinkKVCache takes a pass ({cache.chunk}); read with "
                f"chunk={cache.chunk} or create the cache with chunk={chunk}."
            )
        return
    room = min(context, getattr(cache, "max_length", context))
    if n_tokens - 1 > room:
        raise ValueError(
            f"ids has {n_tokens:,} tokens ({n_tokens - 1:,} read); this {type(cache).__name__} holds {room:,} "
            f"(the model's context is {context:,}). Read at most {room + 1:,} tokens, or use a SinkKVCache."
        )


def read_long_text(
    model: torch.nn.Module,
    ids: torch.Tensor,
    cache,
    chunk: int = 256,
    segment: int = 512,
    progress: bool = True,
) -> LongRead:
    """Read ids [1, N] through `cache` (reset first), `chunk` tokens a forward pass, teacher-forced;
    return the perplexity over all N - 1 scored positions and over each `segment` of them.

    model: labkit's Llama or Gemma3 (a transformers Llama runs as labkit's Llama on the same weights). cache: a
    KVCache, SinkKVCache or labkit.quant.quantized_kv.QuantizedKVCache made for this model. progress: a
    bar over the passes.

        >>> read_long_text(model, long_text_ids(tokenizer, 1024), model.new_cache(max_length=1024)).perplexity
    """
    llama = model if isinstance(model, Gemma3) else as_llama(model)
    check_tensor("ids", ids, "[1, N] of token ids", dims=2)
    if ids.shape[0] != 1 or ids.shape[1] < 2 or ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(
            f"ids must be one row of at least 2 integer token ids [1, N], got {ids.dtype} {tuple(ids.shape)}."
        )
    check_record(
        "cache",
        cache,
        "a labkit cache (KVCache, SinkKVCache, QuantizedKVCache)",
        has=("length", "append", "reset"),
    )
    check_int("chunk", chunk, minimum=1, note="tokens a forward pass")
    check_int("segment", segment, minimum=1, note="scored positions per segment")
    check_fits(cache, ids.shape[1], chunk, llama.config.max_position_embeddings)
    cache.reset()
    ids = ids.to(llama.device)
    n_read = ids.shape[1] - 1  # the last token is only a target
    nll = torch.empty(n_read)
    most, started = 0, time.perf_counter()
    with torch.inference_mode():
        for start in tqdm(range(0, n_read, chunk), desc=cache_label(cache), disable=not progress):
            end = min(start + chunk, n_read)
            logits = llama(ids[:, start:end], cache)[0]  # [end - start, V] float32
            nll[start:end] = F.cross_entropy(logits, ids[0, start + 1 : end + 1], reduction="none").cpu()
            most = max(most, cache.length)
    seconds = time.perf_counter() - started
    segments = tuple(math.exp(float(part.mean())) for part in nll.split(segment))
    return LongRead(
        cache_label(cache), ids.shape[1], segment, math.exp(float(nll.mean())), segments, seconds, most
    )


def reads_table(reads: Sequence[LongRead]) -> str:
    """One column per read (same text, same segments), one row per segment, then the whole text and seconds.

    >>> print(reads_table([plain, sinks, full]))
    """
    check_record("reads", reads, "a list of LongRead (read_long_text's results)", of=(list, tuple))
    if not reads or not all(isinstance(read, LongRead) for read in reads):
        raise TypeError("reads must be a non-empty list of LongRead (read_long_text's results).")
    if len({read.segment for read in reads}) > 1:
        raise ValueError(f"reads must share one segment size, got {[read.segment for read in reads]}.")
    columns = [Column("positions", 13, align="<")] + [
        Column(read.label, max(12, len(read.label) + 2), ".2f") for read in reads
    ]
    longest = max(reads, key=lambda read: read.n_tokens)
    rows = []
    for i, start in enumerate(longest.segment_starts):
        end = min(start + longest.segment, longest.n_tokens - 1)
        cells = [
            read.segment_perplexities[i] if i < len(read.segment_perplexities) else "-" for read in reads
        ]
        rows.append([f"{start}-{end - 1}", *cells])
    rows.append(["all", *(read.perplexity for read in reads)])
    rows.append(["seconds", *(f"{read.seconds:.1f}" for read in reads)])
    return "perplexity per segment of positions, teacher-forced\n" + format_table(columns, rows)
