"""llama.cpp's own KV cache types measured (notebook 15): the quality each costs over the same token ids that
labkit's `kv_quality` reads, and the seconds of one decode step with a long context in each.

llama.cpp stores keys and values as GGML types (`type_k` / `type_v`), in blocks of 32 numbers:

    f32   4 bytes a number         q8_0  34 bytes a block (32 int8 + an f16 scale)
    f16   2 bytes a number         q4_0  18 bytes a block (32 4-bit + an f16 scale)
                                   q4_1  20 bytes a block (32 4-bit + f16 scale and minimum)

A quantized V cache needs flash attention, so every type but f32 runs with it on (as llama-server runs by
default). The f32 reference runs without it: under flash attention llama.cpp casts an f32 cache to f16
before attending (src/llama-graph.cpp, `build_attn_mha`), so "f32" there would be f16 (measured: the two
gave identical logits). Without it, f32 attention is float32 throughout, as labkit's reference. Two things make llama.cpp's quantized caches differ from labkit's
`labkit.quant.quantized_kv`:
- It rotates: with a quantized type and a head size divisible by 64 (SmolLM2's is 64), llama.cpp multiplies
  keys and values by a Walsh-Hadamard matrix before storing them, and the query and the attention output to
  match (src/llama-kv-cache.cpp, `attn_rot_k` / `attn_rot_v`; off with LLAMA_ATTN_ROT_DISABLE=1): its q4_0
  is labkit's "int4-rot" in spirit, "q4_0-norot" (this module's name) is closer to labkit's "int4".
- Within one batch, a token's keys and values are written to the cache first (`cpy_k`, `cpy_v`) and attention
  then reads the whole cache view (`get_k`, `get_v`: src/llama-graph.cpp, `build_attn`), so even the
  batch's own keys are read back quantized, as labkit's QuantizedKVCache returns them.
  Under flash attention on the CPU the query is also rounded to the key type's dot-product partner (q8_0 for
  the quantized types, f16 for f16) before the dot products.

The weights are the GGUF's Q4_1 ones (labkit reads the same file dequantized to float32), and llama.cpp's
matmuls quantize activations to 8 bits, so its f32-KV perplexity is not labkit's float32 one: compare each
engine's quantized rows against its own reference.

    >>> ids = eval_ids(load_tokenizer("smollm2-135m"), 1024)[0].tolist()
    >>> print(llama_kv_quality(ids, ("f16", "q8_0", "q4_0", "q4_0-norot", "q4_1", "q8_0-norot")))

    1024 tokens, teacher-forced, llama.cpp, 256 tokens a batch
    KV cache    bytes/token  x f32  perplexity  top-1 agree  KL (nats)
    f32              46,080  1.000      31.763       100.0%    0.00000
    f16              23,040  0.500      31.827        96.4%    0.00382
    q8_0             12,240  0.266      31.824        96.1%    0.00423
    q4_0              6,480  0.141      33.567        87.1%    0.04441
    q4_0-norot        6,480  0.141      38.391        75.1%    0.16965
    q4_1              7,200  0.156      32.669        87.8%    0.03756
    q8_0-norot       12,240  0.266      31.742        94.6%    0.00476

labkit's `kv_quality` on the same 1,024 ids (float32 weights, its own float32 reference), run just after:
float32 31.673; int8 31.710 / 98.2 % / KL 0.00061; int4 33.546 / 85.4 % / 0.05015; int4-rot 32.838 /
89.2 % / 0.03450. Most of llama.cpp's q8_0 distance is flash attention's f16 path, not the 8 bits: f16
alone moves 0.00382 nats. Its rotated q4_0 (0.044) sits between labkit's int4 and int4-rot, its q4_1
(0.038, labkit int4's bytes) near int4-rot; without rotation q4_0 (one scale, no minimum) is 4x worse.
Measured on a shared 2-core AMD EPYC (AVX2), llama-cpp-python 0.3.36; the figures are the models', not the
machine's (the llama.cpp run took 144 s, labkit's 22 s, one after the other, nothing else running).

At long context, over the same text as `kv_quality`'s long table (`labkit.models.long_text`, Python's own
documentation, SmolLM2 tokens), llama.cpp against its own f32 cache (perplexity / top-1 agreement / KL;
324 s and 1,039 s on a 2-core Intel Xeon with AVX-512, idle):

    tokens   f32      q8_0                       q4_1                        q4_0 (rotated)
     4,096   10.860   10.881 / 96.3 % / 0.00422   11.557 / 87.4 % / 0.05602   11.675 / 87.3 % / 0.06317
     8,192   10.302   10.307 / 96.5 % / 0.00413   10.991 / 87.8 % / 0.05553   11.171 / 87.3 % / 0.06694

Like with like, at 8,192 tokens: labkit's int8 (KL 0.00083) moves its float32 cache's distributions less than
llama.cpp's q8_0 moves its f32 one (0.00413), and labkit's int4-rot (0.04694) less than llama.cpp's rotated
q4_0 (0.06694, fewer bytes: one scale a block, no minimum); llama.cpp's q4_1 (0.05553, int4's bytes) beats
labkit's unrotated int4 (0.06402). Each engine is measured against its own reference (llama.cpp's weights are
the 4-bit file's, its matmuls quantize activations), so the comparison is of what each cache costs.

Decode step, `llama_decode_seconds_at`, 2 threads, OMP_WAIT_POLICY=ACTIVE in a process of its own (llama.cpp's
best on this machine), median of 5, two sweeps (ms), nothing else running:

    context  f32          f16          q8_0         q4_0         q4_0-norot   q4_1
    512      10.0 / 10.9  10.9 / 10.8   9.7 /  9.8  12.4 / 12.4  11.6 / 12.0  12.5 / 12.4
    2,048    16.9 / 18.6  19.8 / 20.2  18.6 / 19.7  27.5 / 29.3  29.2 / 28.6  30.0 / 29.8

8,191 tokens were not timed: the prefill of every type takes minutes on 2 cores.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from contextlib import contextmanager, redirect_stderr

import numpy as np
import torch
import torch.nn.functional as F

from labkit.core.arguments import check_int
from labkit.engines.install import require_llamacpp
from labkit.engines.llamacpp import gguf_path
from labkit.models.eval_data import eval_ids_repeated
from labkit.models.loading import load_tokenizer
from labkit.quant.kv_quality import KVQuality, KVQualityRow, Totals
from labkit.timing import median_seconds

MODEL = "smollm2-135m"  # the GGUF read: SmolLM2-135M-Instruct Q4_1, SmolLM2's vocabulary
KV_LAYOUT = (30, 3, 64)  # SmolLM2-135M's layers, KV heads, head size: what a token adds to K (and V)
BLOCK = 32  # numbers per GGML block of the quantized types
TYPE_BYTES = {"f32": 4 * BLOCK, "f16": 2 * BLOCK, "q8_0": 34, "q4_0": 18, "q4_1": 20}  # bytes per 32 numbers
NO_ROTATION = "-norot"  # a type's name with this suffix: llama.cpp's Hadamard rotation switched off
ROTATION_SWITCH = "LLAMA_ATTN_ROT_DISABLE"  # read by llama.cpp when it makes a KV cache
DECODE_THREADS = 2  # llama.cpp's best count on the course's 2 cores (labkit.benchmarks.fast_best)


def check_kv_type(kv_type: object) -> str:
    """kv_type, if llama.cpp can hold a KV cache of it here; else a ValueError naming the allowed ones."""
    allowed = (*TYPE_BYTES, *(f"{t}{NO_ROTATION}" for t in TYPE_BYTES if t.startswith("q")))
    if kv_type not in allowed:
        raise ValueError(f"kv_type must be one of {allowed}, got {kv_type!r}.")
    return kv_type


def kv_type_bytes_per_token(kv_type: str) -> int:
    """K and V bytes per token of context for SmolLM2-135M: 2 x layers x KV heads x head size numbers.

    >>> kv_type_bytes_per_token("q8_0")
    12240
    """
    layers, heads, head_dim = KV_LAYOUT
    numbers = 2 * layers * heads * head_dim
    return numbers // BLOCK * TYPE_BYTES[check_kv_type(kv_type).removesuffix(NO_ROTATION)]


@contextmanager
def stderr_silenced():
    """stderr sent to /dev/null while the block runs, then back: the C-level stream (file descriptor 2) and
    Python's sys.stderr, where llama-cpp-python's log callback writes (a notebook's sys.stderr is not fd 2).
    llama.cpp prints some notices there even with verbose=False."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null, redirect_stderr(null):
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def load_with_kv(kv_type: str, n_ctx: int, batch: int, threads: int, logits_all: bool):
    """llama.cpp's `Llama` on SmolLM2's GGUF with a K and V cache of kv_type, flash attention on for all but
    f32 (kept float32 only without it); the rotation switch is set only while the cache is made."""
    require_llamacpp()
    import llama_cpp

    ggml = getattr(llama_cpp, f"GGML_TYPE_{kv_type.removesuffix(NO_ROTATION).upper()}")
    before = os.environ.get(ROTATION_SWITCH)
    os.environ[ROTATION_SWITCH] = "1" if kv_type.endswith(NO_ROTATION) else "0"
    try:
        with stderr_silenced():  # llama.cpp says "attention rotation force disabled" on the C stream
            return llama_cpp.Llama(
                model_path=str(gguf_path(MODEL)),
                n_ctx=n_ctx,
                n_batch=batch,
                n_ubatch=batch,
                n_threads=threads,
                n_threads_batch=threads,
                logits_all=logits_all,
                flash_attn=kv_type != "f32",
                type_k=ggml,
                type_v=ggml,
                verbose=False,
            )
    finally:
        os.environ.pop(ROTATION_SWITCH) if before is None else os.environ.update({ROTATION_SWITCH: before})


def _log_probs(kv_type: str, ids: list[int], batch: int, threads: int) -> torch.Tensor:
    """[len(ids) - 1, V] log-softmax of llama.cpp's logits at every position but the last, read in batches."""
    llm = load_with_kv(kv_type, max(len(ids), 256), batch, threads, logits_all=True)
    llm.reset()
    llm.eval(ids[:-1])
    logits = torch.from_numpy(np.array(llm.scores[: len(ids) - 1, : llm.n_vocab()], dtype=np.float32))
    return F.log_softmax(logits.double(), dim=-1)  # float64: a KL of 1e-5 nats survives the sums


def llama_kv_quality(
    text_ids: list[int],
    kv_types: Sequence[str] = ("f32", "q8_0", "q4_0", "q4_1"),
    batch: int = 256,
    threads: int = DECODE_THREADS,
) -> KVQuality:
    """Teacher-forced over text_ids (SmolLM2 token ids, e.g. `eval_ids(tokenizer, 1024)`), `batch` tokens
    a llama_decode call, once per KV type, every position's logits kept; each compared with an f32 cache:
    perplexity, top-1 agreement, mean KL(p_f32 || q) in nats. f32 runs first (added if missing).

        >>> llama_kv_quality(ids[:256]).row("q8_0").top1_agreement
        0.98...
    """
    if not isinstance(text_ids, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in text_ids):
        raise TypeError(f"text_ids must be a list of token ids (int), got {type(text_ids).__name__}.")
    if len(text_ids) < 2:
        raise ValueError(
            f"text_ids must hold at least 2 tokens (one to read, one to predict), got {len(text_ids)}."
        )
    if isinstance(kv_types, str) or not isinstance(kv_types, Sequence) or not kv_types:
        raise ValueError(f"kv_types must be a non-empty sequence of KV type names, got {kv_types!r}.")
    names = list(dict.fromkeys(["f32", *(check_kv_type(k) for k in kv_types)]))
    check_int("batch", batch, minimum=1)
    check_int("threads", threads, minimum=1)
    targets = torch.tensor(text_ids[1:])[:, None]  # [n, 1]: each position's next token
    p = _log_probs("f32", text_ids, batch, threads)  # [n, V]
    if int(targets.max()) >= p.shape[1] or min(text_ids) < 0:
        raise ValueError(f"text_ids must be token ids below the GGUF's vocabulary size {p.shape[1]}.")
    rows = {}
    for name in names:
        q = p if name == "f32" else _log_probs(name, text_ids, batch, threads)
        totals, positions = Totals(), len(targets)
        totals.add(p, q, targets)
        size = kv_type_bytes_per_token(name)
        means = (totals.nll / positions, totals.agree / positions, totals.kl / positions)
        rows[name] = KVQualityRow(name, size, size / kv_type_bytes_per_token("f32"), *means)
    read_by = f"llama.cpp, {batch} tokens a batch"
    return KVQuality(len(text_ids), tuple(rows[name] for name in names), read_by)


def llama_decode_step_at(kv_type: str, context: int, threads: int = DECODE_THREADS) -> Callable[[], None]:
    """One llama.cpp decode step (batch 1), ready to time: a function that evaluates the text's next token
    with `context` tokens of data/eval's text already in a KV cache of kv_type (flash attention on, but for
    f32), then removes it from the cache again, so every call runs at the same context. The context is read
    here, once, in batches of 512.

    context: 1 up to 8,191 (SmolLM2's 8,192 positions minus the step's own token).

        >>> step = llama_decode_step_at("q8_0", context=2048)
        >>> step()   # one decode step at 2,048 tokens
    """
    check_kv_type(kv_type)
    check_int("context", context, minimum=1, maximum=8191, note="SmolLM2's context minus the step's token")
    check_int("threads", threads, minimum=1)
    ids = eval_ids_repeated(load_tokenizer(MODEL), context + 1)[0].tolist()  # the step's token last
    llm = load_with_kv(kv_type, context + 1, 512, threads, logits_all=False)
    llm.reset()
    llm.eval(ids[:context])

    def step() -> None:
        llm.eval(ids[context:])
        llm.n_tokens = context  # the next eval removes the step's token from the cache (kv_cache_seq_rm)

    return step


def llama_decode_seconds_at(
    kv_type: str, context: int, repeats: int = 5, threads: int = DECODE_THREADS
) -> float:
    """The median seconds of one llama.cpp decode step (batch 1) with `context` tokens of data/eval's text
    already in a KV cache of kv_type (`llama_decode_step_at`): one untimed warm-up step, then `repeats`
    timed ones.

        >>> llama_decode_seconds_at("q4_0", context=2048)
        0.0123
    """
    check_int("repeats", repeats, minimum=1)
    return median_seconds(llama_decode_step_at(kv_type, context, threads), repeats)


__all__ = [
    "kv_type_bytes_per_token",
    "llama_decode_seconds_at",
    "llama_decode_step_at",
    "llama_kv_quality",
]
