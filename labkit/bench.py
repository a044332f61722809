"""Benchmarks as ratios against peers measured in the same run (DESIGN.md §5).

    python -m labkit.bench --list
    python -m labkit.bench decode [--new-tokens 128] [--repeats 3]

Each topic prints a readable table, then one JSON line per comparison:
{"bench", "metric", "labkit", "peer", "peer_name", "ratio", "machine"}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch

from labkit.generate import generate_ids
from labkit.llama import Llama
from labkit.models import load_model

BENCH_PROMPT = "The history of the Roman Empire begins with"  # plain text: rarely ends early


def machine_name() -> str:
    """CPU model, logical cores and torch threads, e.g. 'AMD EPYC 7B13, 2 cores, torch 2 threads'."""
    cpu = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as info:
            names = [line.split(":", 1)[1].strip() for line in info if line.startswith("model name")]
        cpu = names[0] if names else cpu
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.get_num_threads()} threads{gpu}"


def median_tokens_per_second(run: Callable[[], int], repeats: int) -> float:
    """Median over `repeats` timed runs of run() -> tokens produced (after one untimed warm-up)."""
    run()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = run()
        rates.append(tokens / (time.perf_counter() - start))
    return statistics.median(rates)


def comparison(bench: str, metric: str, labkit_value: float, peer_value: float, peer_name: str) -> dict:
    return {"bench": bench, "metric": metric, "labkit": round(labkit_value, 3), "peer": round(peer_value, 3),
            "peer_name": peer_name, "ratio": round(labkit_value / peer_value, 3), "machine": machine_name()}


def bench_decode(new_tokens: int = 128, repeats: int = 3) -> list[dict]:
    """Batch-1 greedy decoding of SmolLM2 (fp32): labkit's loop vs transformers `generate`."""
    hf_model, tokenizer = load_model("smollm2-135m")
    labkit_model = Llama.from_hf(hf_model)
    prompt_ids = tokenizer(BENCH_PROMPT)["input_ids"]
    input_ids = torch.tensor([prompt_ids])

    def labkit_loop(model) -> Callable[[], int]:
        return lambda: len(generate_ids(model, tokenizer, prompt_ids, max_new_tokens=new_tokens))

    def hf_generate() -> int:
        with torch.no_grad():
            out = hf_model.generate(input_ids, max_new_tokens=new_tokens, do_sample=False)
        return out.shape[1] - input_ids.shape[1]

    rates = {
        "labkit loop + labkit Llama": median_tokens_per_second(labkit_loop(labkit_model), repeats),
        "labkit loop + transformers model": median_tokens_per_second(labkit_loop(hf_model), repeats),
        "transformers generate": median_tokens_per_second(hf_generate, repeats),
    }
    peer = rates["transformers generate"]
    print(f"decode: SmolLM2-135M fp32, batch 1, greedy, {new_tokens} new tokens, median of {repeats}")
    print(f"machine: {machine_name()}")
    print(f"{'implementation':<36}{'tokens/s':>10}{'vs transformers':>18}")
    for name, rate in rates.items():
        print(f"{name:<36}{rate:>10.1f}{rate / peer:>17.2f}x")
    return [
        comparison("decode", "tokens_per_second", rates["labkit loop + labkit Llama"], peer, "transformers generate"),
        comparison("decode_loop_only", "tokens_per_second", rates["labkit loop + transformers model"], peer,
                   "transformers generate"),
    ]


TOPICS: dict[str, Callable[..., list[dict]]] = {
    "decode": bench_decode,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.bench", description=__doc__.splitlines()[0])
    parser.add_argument("topic", nargs="?", help=f"one of: {', '.join(TOPICS)}")
    parser.add_argument("--list", action="store_true", help="list the topics and exit")
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens to generate per run")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per implementation")
    args = parser.parse_args(argv)
    if args.list:
        for name, function in TOPICS.items():
            print(f"{name:<12}{function.__doc__.splitlines()[0]}")
        return 0
    if args.topic not in TOPICS:
        parser.error(f"unknown topic {args.topic!r}; choose one of: {', '.join(TOPICS)} (or --list)")
    if args.new_tokens < 1 or args.repeats < 1:
        parser.error("--new-tokens and --repeats must be at least 1")
    results = TOPICS[args.topic](new_tokens=args.new_tokens, repeats=args.repeats)
    for result in results:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
