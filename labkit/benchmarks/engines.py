"""Real engines: batch-1 decode of labkit, transformers, llama.cpp and vLLM, and 8 requests at once through three servers.

The servers: labkit's (float32, 8 seats), llama.cpp's own llama-server (Q4_1, 8 slots) and vLLM CPU
(float32); `python -m labkit.bench serve` sweeps them (and labkit's fastest weights) under load.

SmolLM2-135M-Instruct on one machine, one engine at a time: labkit's Llama and transformers run the
float32 weights dequantized from the shipped GGUF file; llama.cpp runs that Q4_1 file itself; vLLM's
CPU build serves labkit's float32 safetensors folder. Batch 1: one greedy chat answer of 64 tokens
(prefill of its 40-token prompt included), median of `repeats`. Concurrency: 8 chat requests of 32
tokens sent at once through the OpenAI API, all output tokens over the wall time, median of `repeats`.
Engines that are not installed are skipped with what to run (`make engines`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch

from labkit.bench import comparison, machine_name
from labkit.benchmarks.serve_servers import FASTEST_LABKIT, LABKIT_FLOAT32, VLLM, contenders
from labkit.engines.install import MAKE_ENGINES, llama_server_installed, llamacpp_installed, vllm_installed
from labkit.engines.llamacpp import load_llamacpp
from labkit.engines.measure import CONCURRENT_REQUESTS, answer_rate, fresh, median_of
from labkit.engines.runners import LabkitRunner, LlamaCppRunner, TransformersRunner
from labkit.engines.server_runner import ServerRunner
from labkit.models.loading import load_model, load_tokenizer
from labkit.serving.http.load import question

MODEL = "smollm2-135m"


def _progress(message: str) -> None:
    print(f"[engines] {message}", file=sys.stderr, flush=True)


def median_rate(measure_once: Callable[[int], float], repeats: int) -> float:
    """The median of measure_once(1), ... measure_once(repeats), after measure_once(0) as an untimed warm-up."""
    measure_once(0)
    return median_of(lambda i: measure_once(i + 1), repeats)


def in_process_rates(repeats: int, tokens: int) -> dict[str, float]:
    """Batch-1 tokens/s of every engine that runs inside this process."""
    model, tokenizer = load_model(MODEL)
    llama, _ = load_model(MODEL, impl="labkit")
    runners = [TransformersRunner(model, tokenizer), LabkitRunner(llama, tokenizer)]
    if llamacpp_installed():
        runners.append(LlamaCppRunner(load_llamacpp(MODEL, n_threads=torch.get_num_threads()), tokenizer))
    rates = {}
    for runner in runners:
        rates[runner.name] = median_rate(lambda i: answer_rate(runner, tokens, number=i), repeats)
        _progress(f"{runner.name}: {rates[runner.name]:.1f} tokens/s at batch 1")
    return rates


def server_rates(repeats: int, tokens: int, concurrent_tokens: int) -> tuple[dict[str, float], dict[str, float]]:
    """(batch-1 tokens/s of vLLM, 8-request tokens/s of each server), one server running at a time."""
    tokenizer = load_tokenizer(MODEL)
    chats = [question(i) for i in range(CONCURRENT_REQUESTS)]
    servers = [server for server in contenders(CONCURRENT_REQUESTS) if server.name != FASTEST_LABKIT]
    batch1, concurrent = {}, {}
    for server in (server for server in servers if server.available):
        began = time.perf_counter()
        with server.start() as handle:
            _progress(f"{server.name} ready after {time.perf_counter() - began:.0f} s")
            runner = ServerRunner(server.name, handle.url, MODEL, tokenizer)
            if server.name == VLLM:
                batch1["vLLM"] = median_rate(lambda i: answer_rate(runner, tokens, number=i), repeats)
            concurrent[server.name] = median_rate(
                lambda i: runner.concurrent_rate([fresh(chat, i * len(chats) + k) for k, chat in enumerate(chats)],
                                                 concurrent_tokens), repeats)
            _progress(f"{server.name}: {concurrent[server.name]:.1f} tokens/s with {CONCURRENT_REQUESTS} requests at once")
    print("\nservers, one at a time:\n" + "\n".join(f"  {server.name}: {server.settings}" for server in servers))
    return batch1, concurrent


def print_table(title: str, rates: dict[str, float], base: str) -> None:
    print(f"\n{title}\n{'engine':<26}{'tokens/s':>10}{'vs ' + base:>20}")
    for name, rate in rates.items():
        print(f"{name:<26}{rate:>10.1f}{rate / rates[base]:>19.2f}x")


def missing_lines() -> list[str]:
    return [f"{name} rows: skipped: not installed. {MAKE_ENGINES}"
            for name, ok in (("llama.cpp", llamacpp_installed()), ("llama-server", llama_server_installed()),
                             ("vLLM", vllm_installed())) if not ok]


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    tokens, concurrent_tokens, repeats = (8, 4, 1) if quick else (64, 32, repeats)
    print(f"engines: SmolLM2-135M-Instruct, greedy chat; batch 1 = one answer of {tokens} tokens (prefill "
          f"included); {CONCURRENT_REQUESTS} requests x {concurrent_tokens} tokens at once through the OpenAI API; "
          f"median of {repeats}\nmachine: {machine_name()}")
    batch1 = in_process_rates(repeats, tokens)
    vllm_batch1, concurrent = server_rates(repeats, tokens, concurrent_tokens)
    batch1.update(vllm_batch1)
    print_table("batch 1 (vLLM over HTTP, the others in-process)", batch1, "labkit")
    print_table(f"{CONCURRENT_REQUESTS} requests at once, through each server", concurrent, LABKIT_FLOAT32)
    for line in missing_lines():
        print(line)
    records = [comparison(f"engines_batch1_vs_{name.replace('.', '')}", "tokens_per_second", batch1["labkit"],
                          rate, f"{name}, batch-1 greedy chat, same model") for name, rate in batch1.items()
               if name != "labkit"]
    records += [comparison(f"engines_concurrent{CONCURRENT_REQUESTS}_vs_{name.split()[0].replace('.', '')}",
                           "tokens_per_second", concurrent[LABKIT_FLOAT32], rate,
                           f"{name}, {CONCURRENT_REQUESTS} requests at once") for name, rate in concurrent.items()
                if name != LABKIT_FLOAT32]
    return records
