"""Decode speed by context for each KV cache kind (notebook 15): one batch-1 decode step of labkit's Llama
with `context` tokens already cached, in the model's dtype or quantized ("int8", "int4", "int4-rot").

A quantized cache stores fewer bytes but dequantizes every cached key and value on every step
(`QuantizedKVCache.append` returns them as floats, so attention runs unchanged): here it does more work per
step than a float cache, not less, and the gap grows with the context. With read_codes=True the cache is a
`labkit.fast.code_attention.CodeReadingKVCache`, whose one-token steps attend over the codes instead.

Filling a cache honestly but cheaply: data/eval's text (repeated to length) is prefilled once into a float
cache, in chunks of 512 tokens, and kept for the model (the longest so far: a causal model's keys at a
position do not depend on later tokens, so a shorter context is its prefix, up to float rounding). Each
kind's cache is then filled by appending those keys and values layer by layer, which quantizes them as a
prefill would; no kind prefills the text again. Each timed step feeds the text's next token and is then
cropped off, so every repeat runs at the same context.

    >>> model, tokenizer = labkit.load_model("smollm2-135m", impl="labkit")
    >>> torch.set_num_threads(1)
    >>> decode_step_seconds_at(model, "int4", context=2048)
    0.1112

Measured so on SmolLM2-135M float32, on a 2-core AMD EPYC (AVX2), idle, two torch threads (notebook 15's
saved run; median of 5 steps, ms; 8,191 rather than 8,192: the step's own token takes SmolLM2's last
position): at 8,191 tokens float32 95.1, int8 180.1, int4 251.6, int4-rot 267.8.

Where a step's time went at 8,191 tokens (torch.profiler, mean of 3 steps, one thread, before int4-rot read
its rows rotated): attention itself is 59-66 ms for every kind (it reads float keys either way); the 60
reads of a quantized cache (keys and values of 30 layers) dequantize for 105 ms (int8) or 150 ms (int4);
quantizing the step's one new token costs 20-29 ms of small operations. int4-rot then multiplied every row
by H, 179 ms more; it now rotates the query and the attention output instead ((q H) . (k H) = q . k and
(p (V H)) H = p V), as llama.cpp does, and costs little more than int4.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

from labkit.core.arguments import check_int
from labkit.core.doors import check_model
from labkit.core.forward import decode_step, forward, vocab_size
from labkit.core.kv_cache import KVCache
from labkit.fast.code_attention import CodeReadingKVCache
from labkit.models.eval_data import eval_ids_repeated
from labkit.models.loading import load_tokenizer
from labkit.quant.quantized_kv import KV_DTYPES, QuantizedKVCache, check_labkit_model, new_kv_cache
from labkit.timing import median_seconds

PREFILL_CHUNK = 512  # tokens a prefill forward pass takes at once: its scores stay [9, 512, 8192] at most
TEXT_MODEL = "smollm2-135m"  # whose tokenizer turns data/eval's text into the ids the cache is filled with
_PREFILLED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (ids [1, N], its float cache)


def text_ids(n_tokens: int) -> torch.Tensor:
    """data/eval's text as SmolLM2 token ids [1, n_tokens], repeated from its start when it is shorter."""
    return eval_ids_repeated(load_tokenizer(TEXT_MODEL), n_tokens)


def prefilled(model: torch.nn.Module, n_tokens: int) -> tuple[torch.Tensor, KVCache]:
    """(ids [1, N], a float cache holding their first N - 1 tokens) with N > n_tokens, made once per model
    and kept until a longer one is asked for (then prefilled again, to the new length)."""
    kept = _PREFILLED.get(model)
    if kept is not None and kept[0].shape[1] > n_tokens:
        return kept
    ids = text_ids(n_tokens + 1).to(model.embed_tokens.weight.device)  # the last one: the step's token
    if int(ids.max()) >= vocab_size(model):
        raise ValueError(
            f"model's vocabulary ({vocab_size(model)}) is smaller than {TEXT_MODEL}'s, "
            "whose tokens of data/eval's text fill the cache."
        )
    cache = model.new_cache(1, n_tokens + 1)
    for start in range(0, n_tokens, PREFILL_CHUNK):
        forward(model, ids[:, start : min(start + PREFILL_CHUNK, n_tokens)], cache, keep=1)
    _PREFILLED[model] = (ids, cache)
    return ids, cache


def filled_cache(
    model: torch.nn.Module, kv_dtype: str | None, context: int, read_codes: bool = False
) -> KVCache | QuantizedKVCache:
    """A cache of kind kv_dtype (None: the model's dtype) holding the text's first `context` tokens, with room
    for one more: the float prefill's keys and values appended layer by layer (quantized on the way in).
    read_codes: a quantized cache is a CodeReadingKVCache, whose decode steps attend over its codes."""
    _, source = prefilled(model, context)
    if read_codes and kv_dtype is not None:
        cache = CodeReadingKVCache.for_model(model, 1, context + 1, kv_dtype)
    else:
        cache = new_kv_cache(model, 1, context + 1, kv_dtype)
    with torch.no_grad():
        for layer in range(model.config.n_layers):
            cache.append(layer, source.keys[layer, :, :, :context], source.values[layer, :, :, :context])
    cache.advance(context)
    return cache


def decode_step_at(
    model: torch.nn.Module, kv_dtype: str | None, context: int, read_codes: bool = False
) -> Callable[[], None]:
    """One batch-1 decode step of labkit's model, ready to time: a function that feeds the text's next token
    with `context` tokens of real text already in a cache of kind kv_dtype (None for the model's own dtype, or
    "int8", "int4", "int4-rot": `labkit.quant.quantized_kv`), then crops the step off again, so every call
    runs at the same context. Filling the cache happens here, not in the step.

    context: 1 up to the model's context minus one (the step's own token takes the last position).
    read_codes: a quantized cache's step attends over its codes instead of dequantizing them
    (`labkit.fast.code_attention.CodeReadingKVCache`; where labkit's kernel is unavailable it dequantizes).

        >>> step = decode_step_at(model, "int8", context=2048, read_codes=True)
        >>> step()   # one decode step at 2,048 tokens; the cache still holds 2,048 after it
    """
    check_model("model", model, "labkit's from-scratch Llama (load it with impl='labkit')")
    check_labkit_model(model)
    if kv_dtype is not None and kv_dtype not in KV_DTYPES:
        raise ValueError(
            f"kv_dtype must be None (the model's dtype) or one of {tuple(KV_DTYPES)}, got {kv_dtype!r}."
        )
    limit = model.config.max_position_embeddings - 1
    check_int("context", context, minimum=1, maximum=limit, note="the model's context minus the step's token")
    if not isinstance(read_codes, bool):
        raise TypeError(
            f"read_codes must be True or False, got {read_codes!r} ({type(read_codes).__name__})."
        )
    ids, _ = prefilled(model, context)
    cache = filled_cache(model, kv_dtype, context, read_codes)
    token = ids[:, context]  # [1]: the text's next token

    def step() -> None:
        with torch.no_grad():
            decode_step(model, token, cache)
        cache.crop(context)

    return step


def decode_step_seconds_at(
    model: torch.nn.Module, kv_dtype: str | None, context: int, repeats: int = 5, read_codes: bool = False
) -> float:
    """The median seconds of one decode step (batch 1) of labkit's model with `context` tokens of real text
    already in a cache of kind kv_dtype (`decode_step_at`, whose arguments these are): one untimed warm-up
    step, then `repeats` timed ones (labkit.timing's median_seconds, so the run log keeps them).

        >>> decode_step_seconds_at(model, "int4-rot", context=512, repeats=5)   # one torch thread
        0.0923
    """
    check_int("repeats", repeats, minimum=1)
    return median_seconds(decode_step_at(model, kv_dtype, context, read_codes), repeats)
