"""`python -m labkit.bench longctx`: decode speed and KV memory by context, for each KV cache kind, labkit
beside llama.cpp on the same weights.

Both engines run SmolLM2-135M's Q4_1 weights (llama.cpp reads the GGUF; labkit quantizes the same model
with its fastest path, `optimize(model, ("fuse", "q4_1"))`), batch 1, 2 threads each (llama.cpp's best
count here, labkit.benchmarks.fast_best; torch's two threads for labkit), at each context of CONTEXTS:
one decode step with that many tokens of data/eval's text already cached, median of `repeats` steps
(`labkit.benchmarks.longctx.decode_step_at`, `labkit.engines.llama_kv.llama_decode_step_at`).
labkit's steps run eager: its compiled decoder (notebook 13's fastest path) keeps only a float cache.
Memory is the cache's bytes at that context (scales counted). llama.cpp runs flash attention for every
type but f32 (a quantized V cache needs it; f32 stays float32 only without it).

The JSON compares like with like at the longest context: each labkit kind against llama.cpp's type of the
same bits (float32 / f32, int8 / q8_0, int4 / q4_1, int4-rot / q4_0, both rotated), and each quantized
labkit kind against labkit's own float32 cache (the speed a smaller cache buys, or costs). The rows "int8,
codes read" etc. run the same kinds with read_codes=True (`labkit.fast.code_attention.CodeReadingKVCache`:
a decode step's attention reads the codes instead of dequantizing every row), each also compared with
labkit's float32.

Every kind at a context is timed in turns: all caches filled first, then rounds in which each kind (labkit's
and llama.cpp's) takes one step, so a change of the machine's load hits every kind alike.

    python -m labkit.bench longctx --repeats 7  # 512, 2,048 and 8,191 tokens: 13 minutes on 2 cores, idle
    python -m labkit.bench longctx --quick      # 128 and 256 tokens: checks the bench runs, not speed

The saved run (2-core AMD EPYC with AVX-512, idle by its load line, 7 steps a median taken in turns; tokens/s
at 512 / 2,048 / 8,191 tokens cached):

    labkit float32 KV          38.2 / 24.7 / 17.9     llama.cpp f32    36.8 / 27.2 / 22.3
    labkit int8, dequantizing  22.9 / 15.5 /  8.8     llama.cpp q8_0   34.8 / 26.2 / 18.1
    labkit int8, codes read    41.9 / 32.5 / 35.6     llama.cpp q4_1   34.9 / 22.8 / 12.0
    labkit int4-rot, codes     37.7 / 32.2 / 32.1     llama.cpp q4_0   34.7 / 22.1 / 12.4

At 8,191 tokens int8 read as codes ran 1.99x labkit's float32 cache and 1.97x llama.cpp's q8_0; int4-rot read
as codes 1.79x float32 and 2.59x llama.cpp's q4_0; labkit's float32 cache 0.80x llama.cpp's f32. The aims of
notebook 15's issue (int8 at least 1.3x float32, rotated 4-bit 1.6x) are met. The run just before it, the same
way, 13 minutes earlier, found every step of both engines about twice as long at 8,191 tokens (labkit float32
109 ms against 56; llama.cpp q8_0 67 ms against 55) though its load line also said idle: int8 codes 2.74x
float32, int4-rot codes 2.63x, and labkit float32 0.48x llama.cpp's f32. A probe of four kinds between the two
runs (labkit float32 and int8 codes, llama.cpp f32 and q8_0, in turns) took 46, 20, 29 and 35 ms. So on this
shared VM the ratios between kinds stay on the same side of the aims, but their size moves with the machine;
likely (not measured) because a step that reads 377 MB of float32 keys and values suffers more when others
share the memory bus than one that reads 97 MB of codes.

An earlier saved run, on a 2-core Intel Xeon with AVX-512 (idle, its kinds one after another, 3 steps a
median): at 8,191 tokens int8 codes 1.48x labkit's float32 and 1.45x llama.cpp's q8_0, int4-rot codes 1.46x
float32 (three shorter runs the same hour: 1.57x, 1.65x, 1.79x). Where an int4-rot step at 8,191 tokens went
there (torch.profiler, 3 steps, idle): the kernel 21 ms, the Q4_1 matmuls 19 ms, the head 2.4 ms, the rest
small operations that every cache kind runs. An AVX-512 variant of the kernel was tried and ran slower than
its AVX2 path there (1.02 against 0.79 ms a layer on one thread), so the kernel has none.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from labkit.benchmarks.comparison import comparison
from labkit.benchmarks.longctx import decode_step_at, prefilled
from labkit.benchmarks.progress import progress
from labkit.engines.install import MAKE_ENGINES, llamacpp_installed
from labkit.engines.llama_kv import DECODE_THREADS, kv_type_bytes_per_token, llama_decode_step_at
from labkit.fast.optimize import optimize
from labkit.models.loading import load_model
from labkit.quant.quantized_kv import kv_bytes_per_token
from labkit.this_machine import run_line
from labkit.timing import interleaved_seconds

CONTEXTS, QUICK_CONTEXTS = (512, 2048, 8191), (128, 256)
LABKIT_KINDS = ("float32", "int8", "int4", "int4-rot")
CODES_READ = ", codes read"  # a kind's row name with read_codes=True: "int8, codes read"
CODES_KINDS = tuple(kind + CODES_READ for kind in LABKIT_KINDS[1:])
SAME_BITS = {"float32": "f32", "int8": "q8_0", "int4": "q4_1", "int4-rot": "q4_0"}  # labkit -> llama.cpp
SMOLLM2_KV = (30, 3, 64)  # SmolLM2-135M's layers, KV heads, head size


@dataclass(frozen=True)
class Row:
    """One engine's KV kind: seconds of one decode step and the cache's bytes, per context."""

    engine: str  # "labkit" or "llama.cpp"
    kind: str  # labkit's kv_dtype or llama.cpp's type_k / type_v
    seconds: dict[int, float]  # context -> median seconds of one decode step
    bytes_per_token: int

    def tokens_per_second(self, context: int) -> float:
        return 1.0 / self.seconds[context]


def labkit_steps(model: torch.nn.Module, context: int) -> dict[str, Callable[[], None]]:
    """Each labkit KV kind's decode step at `context`, its cache filled (`decode_step_at`)."""
    steps = {}
    for kind in (*LABKIT_KINDS, *CODES_KINDS):
        dtype = kind.removesuffix(CODES_READ)
        kv_dtype, read_codes = None if kind == "float32" else dtype, kind.endswith(CODES_READ)
        steps[kind] = decode_step_at(model, kv_dtype, context, read_codes)
    return steps


def llamacpp_steps(context: int) -> dict[str, Callable[[], None]]:
    """Each llama.cpp KV type of SAME_BITS's decode step at `context`, in this process (llama-cpp-python)."""
    return {kind: llama_decode_step_at(kind, context, DECODE_THREADS) for kind in SAME_BITS.values()}


def interleaved_rows(contexts: tuple[int, ...], repeats: int, with_llamacpp: bool) -> list[Row]:
    """labkit's Q4_1 model with each of its KV cache kinds, and llama.cpp with each of its types when
    with_llamacpp, at each context: every kind's cache filled first, then `repeats` rounds in which each kind
    takes one timed step in turn (after one untimed round), so a change of the machine's load mid-way hits
    every kind alike (`labkit.timing.interleaved_seconds`). A kind's seconds: the median of its steps."""
    model, _ = load_model("smollm2-135m", impl="labkit")
    model = optimize(model, ("fuse", "q4_1"))
    prefilled(model, max(contexts))  # one float prefill, whose prefixes fill every shorter context
    seconds: dict[tuple[str, str], dict[int, float]] = {}
    for context in contexts:
        engines = "labkit's 7 KV kinds" + (" and llama.cpp's 4" if with_llamacpp else "")
        progress("longctx", f"{context:,} tokens: filling {engines}, then {repeats} rounds of one step each")
        steps = {("labkit", kind): step for kind, step in labkit_steps(model, context).items()}
        if with_llamacpp:
            steps |= {("llama.cpp", kind): step for kind, step in llamacpp_steps(context).items()}
        times = interleaved_seconds(list(steps.values()), repeats, warmup=True)
        for key, kind_times in zip(steps, times):
            seconds.setdefault(key, {})[context] = statistics.median(kind_times)
        del steps  # frees this context's caches (llama.cpp's instances too) before the next is filled
    return [
        Row(engine, kind, by_context, bytes_per_token(engine, kind))
        for (engine, kind), by_context in seconds.items()
    ]


def bytes_per_token(engine: str, kind: str) -> int:
    """A kind's cache bytes per token: labkit's (scales counted) or llama.cpp's GGML type's."""
    if engine == "llama.cpp":
        return kv_type_bytes_per_token(kind)
    return kv_bytes_per_token(kind.removesuffix(CODES_READ), *SMOLLM2_KV)


def print_table(rows: list[Row], contexts: tuple[int, ...], repeats: int, load_line: str) -> None:
    """Tokens/s and cache MB per engine and kind, one column pair per context; load_line: `run_line()`
    taken before the timings (the machine, and whether other work shared it)."""
    print(
        f"longctx: SmolLM2-135M Q4_1 weights, batch-1 decode with N tokens cached, median of {repeats} steps "
        "taken in turns (every kind one step a round); "
        f"labkit fuse+q4_1, torch {torch.get_num_threads()} threads; llama.cpp {DECODE_THREADS} threads, "
        "flash attention but for f32"
    )
    print(f"machine: {load_line}")
    header = "".join(f"  {f'{c:,} tok/s':>13} {'cache MB':>9}" for c in contexts)
    print(f"{'engine':<10} {'KV':<18}{header}")
    for row in rows:
        cells = "".join(
            f"  {row.tokens_per_second(c):13.1f} {row.bytes_per_token * c / 1e6:9.1f}" for c in contexts
        )
        print(f"{row.engine:<10} {row.kind:<18}{cells}")


def slug(kind: str) -> str:
    """A kind's name in a record: "int8" -> "int8", "int8, codes read" -> "int8_codes"."""
    return kind.removesuffix(CODES_READ) + ("_codes" if kind.endswith(CODES_READ) else "")


def records(rows: list[Row], context: int) -> list[dict]:
    """At `context`: each labkit kind, dequantizing or reading codes (CODES_KINDS), against llama.cpp's type
    of the same bits, then each quantized labkit kind against labkit's float32 cache (tokens/s, higher is
    better). Only the rows that were run are paired."""
    labkit = {row.kind: row for row in rows if row.engine == "labkit"}
    llama = {row.kind: row for row in rows if row.engine == "llama.cpp"}
    pairs = []  # (bench name, labkit's row, the peer's row, the peer's name)
    for kind, peer in SAME_BITS.items():
        for own in (kind, kind + CODES_READ):
            if own in labkit and peer in llama:
                pairs.append(
                    (f"longctx_{slug(own)}_kv", labkit[own], llama[peer], f"llama.cpp {peer} KV cache")
                )
    for own in (*LABKIT_KINDS[1:], *CODES_KINDS):
        if own in labkit:
            pairs.append(
                (
                    f"longctx_{slug(own)}_kv_vs_float32",
                    labkit[own],
                    labkit["float32"],
                    "labkit float32 KV cache",
                )
            )
    return [
        comparison(
            name,
            "tokens_per_second",
            a.tokens_per_second(context),
            b.tokens_per_second(context),
            f"{peer} at {context} tokens",
        )
        for name, a, b, peer in pairs
    ]


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    contexts = QUICK_CONTEXTS if quick else CONTEXTS
    load_line = run_line().removeprefix("this run: ")
    with_llamacpp = llamacpp_installed()
    if not with_llamacpp:
        progress("longctx", f"llama.cpp is not installed ({MAKE_ENGINES}): labkit's rows only")
    rows = interleaved_rows(contexts, repeats, with_llamacpp)
    print_table(rows, contexts, repeats, load_line)
    return records(rows, contexts[-1])
