"""The fast decode path, step by step (tokens/s, bytes/token, bandwidth use), against llama.cpp.

SmolLM2-135M, batch 1, greedy, 128 new tokens, median of `repeats`, every row in this one run:

    transformers generate, float32        the peer in the library everyone starts from
    labkit Llama, float32                 the reference all ratios are taken against
    + fused                               labkit.fast step "fuse"
    + int8 weight-only, head int8         ... "int8"
    int4 g32, head int8 (not on int8)     ... "int4"
    + bfloat16 for the rest               ... "bf16"
    fused, bfloat16 weights               "fuse", "bf16": half the bytes without integer codes
    int4, static KV cache                 labkit.fast.StaticDecoder: fixed shapes, the same eager ops
    + torch.compile                       the static decode step compiled once by inductor
    + prompt lookup, 4 guesses            one compiled verify pass of 5 tokens per call
    llama.cpp, the Q4_1 GGUF              when `import llama_cpp` works, same prompt and thread count

The thread count is a measured step: a short probe picks the fastest count for the int4 path, every
row runs with it, and the fastest labkit path is timed again at torch's default count.
Utilisation = bytes of weights read per token x tokens/s / the memory bandwidth measured in this run.
The compiled rows compile on their warm-up run (its seconds are printed); `--quick` leaves them out.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from labkit.bench import comparison, interleaved_tokens_per_second, machine_name, median_tokens_per_second
from labkit.core.forward import decode_step, prefill
from labkit.core.llama import Llama
from labkit.decoding.generate import generate_ids
from labkit.fast.optimize import optimize
from labkit.fast.static import StaticDecoder, break_even_tokens, inductor_cache, slots_for
from labkit.fast.roofline import bandwidth_utilisation, measured_bandwidth, weight_bytes_per_token
from labkit.fast.threads import fastest_thread_count, thread_candidates, using_threads
from labkit.models.loading import load_model
from labkit.models.registry import EMBEDDED_MODELS

MODEL = "smollm2-135m"
BENCH_PROMPT = "The history of the Roman Empire begins with"  # plain text: rarely ends early
LLAMA_CPP = "llama.cpp (llama-cpp-python), Q4_1 GGUF"
FP32 = "labkit Llama, float32"
# (row label, steps of labkit.fast.optimize; None: transformers generate on the same weights, how it decodes)
# how: "loop" labkit's generate_ids, "static" StaticDecoder eager, "compiled" its compiled step,
# "lookup" the compiled verify step with prompt-lookup guesses.
ROWS: list[tuple[str, tuple[str, ...] | None, str]] = [
    ("transformers generate, float32", None, "transformers"),
    (FP32, (), "loop"),
    ("+ fused QKV and gate/up", ("fuse",), "loop"),
    ("+ int8 weight-only, head int8", ("fuse", "int8"), "loop"),
    ("int4 g32 (not int8), head int8", ("fuse", "int4"), "loop"),
    ("+ bfloat16 for the rest", ("fuse", "int4", "bf16"), "loop"),
    ("fused, bfloat16 weights", ("fuse", "bf16"), "loop"),
    ("int4, static KV cache (eager)", ("fuse", "int4"), "static"),
    ("+ torch.compile, static shapes", ("fuse", "int4"), "compiled"),
    ("+ prompt lookup, 4 guesses", ("fuse", "int4"), "lookup"),
]
COMPILED = ("compiled", "lookup")  # rows left out by --quick
GAMMA = 4  # guesses per verify call of the lookup row
PROBE_STEPS = ("fuse", "int4")  # the path the thread probe times
PROBE_TOKENS = {False: 32, True: 4}  # decode steps per probe run, full and --quick
DEFAULT_THREADS = "fastest labkit path, default threads"  # the row that times the thread step
STATIC_EAGER = "int4, static KV cache (eager)"  # what the compiled rows' break-even is taken against


@dataclass(frozen=True)
class Row:
    """One measured line of the waterfall."""

    label: str  # what ran
    threads: int  # torch (or llama.cpp) threads it ran with
    tokens_per_second: float  # median of the timed runs
    bytes_per_token: float  # weights read per new token


def fastest_labkit(rows: list[Row]) -> Row:
    """The fastest row of labkit's own paths (not transformers, llama.cpp or the thread-step row)."""
    labkit_rows = {label for label, steps, _ in ROWS if steps is not None}
    return max((r for r in rows if r.label in labkit_rows), key=lambda r: r.tokens_per_second)


def labkit_model(hf_model: torch.nn.Module, steps: tuple[str, ...]) -> Llama:
    """labkit's Llama on the transformers model's weights, with `steps` applied (the peer is untouched)."""
    return optimize(Llama.from_hf(hf_model), steps)


def labkit_run(model: torch.nn.Module, tokenizer, prompt_ids: list[int], new_tokens: int) -> Callable[[], int]:
    """A run of labkit's generation loop: returns the number of tokens produced."""
    return lambda: len(generate_ids(model, tokenizer, prompt_ids, max_new_tokens=new_tokens))


def static_run(decoder: StaticDecoder, prompt_ids: list[int], new_tokens: int, how: str) -> Callable[[], int]:
    """A run of the static decoder, plain or with prompt lookup: returns the number of tokens produced."""
    if how == "lookup":
        return lambda: len(decoder.generate_with_lookup(prompt_ids, new_tokens, gamma=GAMMA)[0])
    return lambda: len(decoder.generate(prompt_ids, new_tokens))


def hf_run(hf_model: torch.nn.Module, prompt_ids: list[int], new_tokens: int) -> Callable[[], int]:
    """A run of transformers `generate`, greedy: returns the number of tokens produced."""
    input_ids = torch.tensor([prompt_ids])

    def run() -> int:
        with torch.no_grad():
            out = hf_model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                    max_new_tokens=new_tokens, do_sample=False)
        return out.shape[1] - input_ids.shape[1]
    return run


def decode_probe(model: Llama, prompt_ids: list[int], steps: int) -> Callable[[], None]:
    """A prefill and `steps` greedy decode steps: the short piece of work the thread probe times."""
    input_ids = torch.tensor([prompt_ids])

    def run() -> None:
        logits, cache = prefill(model, input_ids, max_length=input_ids.shape[1] + steps + 1)
        for _ in range(steps):
            logits = decode_step(model, logits.argmax(-1), cache)
    return run


def llama_cpp_row(prompt: str, new_tokens: int, threads: int, repeats: int) -> Row | None:
    """llama.cpp on the shipped GGUF, greedy, exactly new_tokens tokens; None when llama_cpp is missing."""
    if importlib.util.find_spec("llama_cpp") is None:
        return None
    import llama_cpp

    gguf = EMBEDDED_MODELS[MODEL].locate_gguf()
    llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=512, n_threads=threads, n_threads_batch=threads,
                          verbose=False)
    tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=False)

    def run() -> int:
        produced = 0
        for _ in llm.generate(tokens, temp=0.0, reset=True):  # temp 0: greedy
            produced += 1
            if produced == new_tokens:
                break
        return produced
    return Row(LLAMA_CPP, threads, median_tokens_per_second(run, repeats), gguf.stat().st_size)


def choose_threads(hf_model: torch.nn.Module, prompt_ids: list[int], quick: bool) -> tuple[int, dict[int, float]]:
    """The probe: (fastest thread count for the int4 path, {count: seconds})."""
    model = labkit_model(hf_model, PROBE_STEPS)
    return fastest_thread_count(decode_probe(model, prompt_ids, PROBE_TOKENS[quick]), thread_candidates())


def row_run(hf_model, model, tokenizer, prompt_ids: list[int], new_tokens: int, how: str):
    """(the run to time, the StaticDecoder it uses or None) for one row of ROWS."""
    if how == "transformers":
        return hf_run(hf_model, prompt_ids, new_tokens), None
    if how == "loop":
        return labkit_run(model, tokenizer, prompt_ids, new_tokens), None
    decoder = StaticDecoder(model, slots_for(len(prompt_ids) + new_tokens, model.config.max_position_embeddings),
                            compile=how in COMPILED)
    return static_run(decoder, prompt_ids, new_tokens, how), decoder


def measure_rows(hf_model, tokenizer, prompt_ids: list[int], new_tokens: int, repeats: int, threads: int,
                 quick: bool = False, labels: Sequence[str] | None = None,
                 progress: bool = False) -> tuple[list[Row], dict[str, float]]:
    """The rows of ROWS named in `labels` (default: all; the compiled ones only when not quick), each at
    `threads` threads, timed in turns (labkit.bench.interleaved_tokens_per_second): (rows, {label: compile
    seconds} of the compiled ones). progress: a tqdm bar over the rounds.

        >>> rows, compiled = measure_rows(hf_model, tokenizer, ids, 48, 3, 2, labels=[FP32, STATIC_EAGER])
    """
    unknown = set(labels or ()) - {label for label, _, _ in ROWS}
    if unknown:
        raise ValueError(f"Unknown rows {sorted(unknown)}; the rows are: {[label for label, _, _ in ROWS]}.")
    chosen = [(label, steps, how) for label, steps, how in ROWS
              if (labels is None and not (quick and how in COMPILED)) or (labels is not None and label in labels)]
    prepared = []  # (label, model, run, decoder)
    with using_threads(threads):
        for label, steps, how in chosen:
            model = hf_model if steps is None else labkit_model(hf_model, steps)
            prepared.append((label, model, *row_run(hf_model, model, tokenizer, prompt_ids, new_tokens, how)))
        bar = (lambda rounds: tqdm(rounds, desc="rounds (the first compiles)")) if progress else None
        rates = interleaved_tokens_per_second([run for _, _, run, _ in prepared], repeats, bar)
    rows = [Row(label, threads, rate, weight_bytes_per_token(model))
            for (label, model, _, _), rate in zip(prepared, rates)]
    compile_seconds = {label: sum(decoder.compile_seconds.values())
                       for label, _, _, decoder in prepared if decoder is not None and decoder.compiled}
    return rows, compile_seconds


def table(rows: list[Row], bandwidth: float) -> str:
    """The waterfall as text: one line per row, ratios against labkit float32 and llama.cpp."""
    base = next(r for r in rows if r.label == FP32).tokens_per_second
    peer = next((r.tokens_per_second for r in rows if r.label == LLAMA_CPP), None)
    lines = [f"{'path':<42}{'threads':>8}{'tok/s':>8}{'x fp32':>8}{'MB/tok':>8}{'GB/s':>7}{'of bw':>7}"
             f"{'x llama.cpp':>12}"]
    for r in rows:
        moved = r.bytes_per_token * r.tokens_per_second
        versus = f"{r.tokens_per_second / peer:>11.2f}x" if peer else f"{'-':>12}"
        lines.append(f"{r.label:<42}{r.threads:>8}{r.tokens_per_second:>8.1f}{r.tokens_per_second / base:>7.2f}x"
                     f"{r.bytes_per_token / 1e6:>8.1f}{moved / 1e9:>7.1f}"
                     f"{bandwidth_utilisation(r.bytes_per_token, r.tokens_per_second, bandwidth):>7.0%}{versus}")
    return "\n".join(lines)


def records(rows: list[Row], bandwidth: float) -> list[dict]:
    """The JSON comparisons: each step against labkit float32, the fastest path against its peers."""
    by_label = {r.label: r for r in rows}
    fp32 = by_label[FP32].tokens_per_second
    fastest = fastest_labkit(rows)
    out = [comparison("fast_fp32_vs_transformers", "tokens_per_second", fp32,
                      by_label["transformers generate, float32"].tokens_per_second, "transformers generate fp32")]
    for label, steps, how in ROWS[2:]:
        if label in by_label:
            name = "_".join(steps) + ("" if how == "loop" else "_" + how)
            out.append(comparison("fast_" + name, "tokens_per_second", by_label[label].tokens_per_second,
                                  fp32, "labkit Llama fp32"))
    out.append(comparison("fast_bandwidth", "bytes_per_second", fastest.bytes_per_token * fastest.tokens_per_second,
                          bandwidth, "measured memory bandwidth (copy)"))
    default = next((r for r in rows if r.label == DEFAULT_THREADS), None)
    if default is not None:
        out.append(comparison("fast_threads", "tokens_per_second", fastest.tokens_per_second,
                              default.tokens_per_second, f"same path at torch's default {default.threads} threads"))
    if LLAMA_CPP in by_label:
        out.append(comparison("fast_vs_llama_cpp", "tokens_per_second", fastest.tokens_per_second,
                              by_label[LLAMA_CPP].tokens_per_second, LLAMA_CPP))
    return out


def compile_report(rows: list[Row], compile_seconds: dict[str, float]) -> str:
    """The compile time of each compiled row, and after how many tokens it pays for itself."""
    rates = {r.label: r.tokens_per_second for r in rows}
    lines = []
    for label, seconds in compile_seconds.items():
        tokens = break_even_tokens(seconds, rates[STATIC_EAGER], rates[label])  # against the eager static step
        pays = f"pays for itself after {tokens:,.0f} tokens" if tokens < math.inf else "never pays for itself here"
        lines.append(f"compile: {label.lstrip('+ ')}: {seconds:.1f} s on its first call (inductor's cache: "
                     f"{inductor_cache()}); against the eager static step it {pays}")
    return "\n".join(lines)


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    new_tokens = 8 if quick else 128
    hf_model, tokenizer = load_model(MODEL)
    prompt_ids = tokenizer(BENCH_PROMPT)["input_ids"]
    bandwidth = measured_bandwidth()
    default_threads = torch.get_num_threads()
    threads, probe = choose_threads(hf_model, prompt_ids, quick)
    rows, compile_seconds = measure_rows(hf_model, tokenizer, prompt_ids, new_tokens, repeats, threads, quick)
    fastest = fastest_labkit(rows)
    if threads != default_threads:
        steps, how = next((steps, how) for label, steps, how in ROWS if label == fastest.label)
        run_fastest, _ = row_run(hf_model, labkit_model(hf_model, steps), tokenizer, prompt_ids, new_tokens, how)
        with using_threads(default_threads):
            rate = median_tokens_per_second(run_fastest, repeats)
        rows.append(Row(DEFAULT_THREADS, default_threads, rate, fastest.bytes_per_token))
    cpp = llama_cpp_row(BENCH_PROMPT, new_tokens, threads, repeats)
    rows += [cpp] if cpp else []
    print(f"fast: SmolLM2-135M, batch 1, greedy, {new_tokens} new tokens, median of {repeats}")
    print(f"machine: {machine_name()}")
    print(f"memory bandwidth (copy of 128 MB, best of 5): {bandwidth / 1e9:.1f} GB/s")
    timings = ", ".join(f"{count} -> {seconds:.2f} s" for count, seconds in probe.items())
    print(f"threads: the int4 path, prefill + {PROBE_TOKENS[quick]} decode steps, median of 3: {timings}")
    print(f"         every row uses {threads} threads (torch's default here: {default_threads})")
    print(table(rows, bandwidth))
    if cpp is None:
        print("llama.cpp: skipped, `import llama_cpp` fails here; `pip install llama-cpp-python==0.3.36` "
              "(or the planned `make engines`) adds its row.")
    print("MB/tok: weights read per token (the KV cache not counted; llama.cpp: its GGUF file's size)")
    print(compile_report(rows, compile_seconds) if compile_seconds else
          "compiled rows: left out by --quick (each compiles for about 2 minutes on 2 cores the first time)")
    return records(rows, bandwidth)
