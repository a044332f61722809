"""The halves of `python -m labkit.bench fast` that run in a process of their own, one per OpenMP wait policy.

    python -m labkit.benchmarks.fast_child labkit    --tokens 128 --repeats 3 [--quick]
    python -m labkit.benchmarks.fast_child llama_cpp --tokens 128 --repeats 3
    python -m labkit.benchmarks.fast_child row --row "+ torch.compile (labkit's kernel)" --tokens 32

`labkit` probes the thread count for the int4 path, then times every row of labkit.benchmarks.fast.ROWS
at that count, and predicts the step of each labkit row with labkit.fast.cost; `llama_cpp` times llama.cpp
on the shipped GGUF at every thread count; `row` times one labkit row at every thread count (notebook 13's
labkit at its best). Each prints one JSON object per row; the parent
(labkit.benchmarks.fast.run) keeps each row's best.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys

from labkit.benchmarks import fast
from labkit.benchmarks.fast_rows import BENCH_PROMPT, COMPILED, MODEL, PROBE_STEPS, ROWS
from labkit.fast.processes import current_policy
from labkit.fast.threads import thread_candidates, using_threads
from labkit.models.loading import load_model
from labkit.models.registry import EMBEDDED_MODELS
from labkit.timing import median_tokens_per_second


def llama_cpp_simd(llama_cpp) -> str:
    """The SIMD extensions the loaded llama.cpp was built with, from its system info ("AVX2 FMA ... AVX512")."""
    info = llama_cpp.llama_print_system_info().decode()
    return " ".join(
        part.split("=")[0].strip()
        for part in info.replace("CPU :", "").split("|")
        if part.strip().endswith("= 1") and part.strip().startswith(("AVX", "FMA", "F16C"))
    )


def llama_cpp_rates(prompt: str, new_tokens: int, repeats: int) -> list[dict]:
    """llama.cpp, greedy, exactly new_tokens tokens, at each thread count; [] when llama_cpp is missing."""
    if importlib.util.find_spec("llama_cpp") is None:
        return []
    import llama_cpp

    gguf = EMBEDDED_MODELS[MODEL].locate_gguf()
    rows = []
    for threads in thread_candidates():
        llm = llama_cpp.Llama(
            model_path=str(gguf), n_ctx=512, n_threads=threads, n_threads_batch=threads, verbose=False
        )
        tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=False)

        def run() -> int:
            produced = 0
            for _ in llm.generate(tokens, temp=0.0, reset=True):  # temp 0: greedy
                produced += 1
                if produced == new_tokens:
                    break
            return produced

        rate = median_tokens_per_second(run, repeats)
        rows.append(
            {
                "label": fast.LLAMA_CPP,
                "threads": threads,
                "tokens_per_second": rate,
                "bytes_per_token": gguf.stat().st_size,
                "simd": llama_cpp_simd(llama_cpp),
            }
        )
        llm = None  # frees this model before the next thread count loads its own
    return rows


def labkit_rates(new_tokens: int, repeats: int, quick: bool) -> list[dict]:
    """Every row of fast.ROWS at the probe's thread count, with the cost model's terms (all but prompt lookup)."""
    hf_model, tokenizer = load_model(MODEL)
    prompt_ids = tokenizer(BENCH_PROMPT)["input_ids"]
    # each eager labkit row's weights quantized once, for its timing and its cost model's step (a compiled
    # row builds its own in each: the cost model counts the kernels of its own compile); the thread probe
    # reads the weights of the first row on its path
    models = {
        label: fast.labkit_model(hf_model, steps)
        for label, steps, how in ROWS
        if steps is not None and how not in COMPILED
    }
    probe_model = next(models[label] for label, steps, how in ROWS if steps == PROBE_STEPS and how == "loop")
    threads, probe = fast.choose_threads(hf_model, prompt_ids, quick, model=probe_model)
    rows, compile_seconds = fast.measure_rows(
        hf_model, tokenizer, prompt_ids, new_tokens, repeats, threads, quick, models=models
    )
    context = len(prompt_ids) + new_tokens // 2  # the middle of the run
    with using_threads(threads):
        labels = [row.label for row in rows]
        costs = fast.row_costs(hf_model, labels, context, repeats=1 if quick else 5, models=models)
    out = []
    for row in rows:
        record = {
            "label": row.label,
            "threads": threads,
            "tokens_per_second": row.tokens_per_second,
            "bytes_per_token": row.bytes_per_token,
            "probe": {str(k): v for k, v in probe.items()},
            "compile_seconds": compile_seconds.get(row.label),
        }
        if row.label in costs:
            record["costs"] = costs[row.label].as_dict()
        out.append(record)
    return out


def row_rates(label: str, new_tokens: int, repeats: int) -> list[dict]:
    """One row of fast.ROWS at every thread count (a compiled row compiles on its first count)."""
    hf_model, tokenizer = load_model(MODEL)
    prompt_ids = tokenizer(BENCH_PROMPT)["input_ids"]
    out = []
    for threads in thread_candidates():
        [row], compile_seconds = fast.measure_rows(
            hf_model, tokenizer, prompt_ids, new_tokens, repeats, threads, labels=[label]
        )
        out.append(
            {
                "label": label,
                "threads": threads,
                "tokens_per_second": row.tokens_per_second,
                "bytes_per_token": row.bytes_per_token,
                "compile_seconds": compile_seconds.get(label),
                "alone": True,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m labkit.benchmarks.fast_child", description=__doc__.splitlines()[0]
    )
    parser.add_argument("job", choices=("labkit", "llama_cpp", "row"))
    parser.add_argument("--row", help="the label of one row of labkit.benchmarks.fast.ROWS (job `row`)")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.job == "llama_cpp":
        rows = llama_cpp_rates(BENCH_PROMPT, args.tokens, args.repeats)
    elif args.job == "row":
        rows = row_rates(args.row, args.tokens, args.repeats)
    else:
        rows = labkit_rates(args.tokens, args.repeats, args.quick)
    for row in rows:
        print(json.dumps({**row, "policy": current_policy()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
