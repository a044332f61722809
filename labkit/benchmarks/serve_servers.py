"""The servers `python -m labkit.bench serve` compares, each with the settings it runs at its best.

    labkit server, float32      labkit's Llama, float32 weights packed for oneDNN's matmul (as vLLM's CPU
                                build runs its own), its engine's continuous batching, its decode step
                                compiled per batch size (eager with --quick: no compile)
    labkit server, fuse+q4_1    the same with fused projections and Q4_1 weights on labkit's own kernel
                                (labkit.fast.optimize: Q4_1 x Q8_1 for every row of a batch, head Q8_0),
                                its decode step compiled per batch size (labkit.serving.compiled_step;
                                eager with --quick)
    llama-server                llama.cpp's own server on the shipped Q4_1 GGUF, one slot per seat
    vLLM CPU                    vLLM 0.32's CPU build, float32, eager, 1 GiB of KV cache, its default threads,
                                tcmalloc and Intel OpenMP preloaded as its CPU docs ask (labkit.engines.vllm)
    vLLM CPU, all cores         the same with an OpenMP thread on every core and none kept for its API server

Only labkit's fastest row and llama-server both read 4-bit weights (both Q4_1 with 8-bit activations,
llama.cpp's grid, each its own code); vLLM's CPU build serves float32 or bfloat16 only, so it is compared
in float32, like labkit's first row, at the better of its two thread settings.

    >>> [server.name for server in contenders(seats=16)]
    ['labkit server, float32', 'labkit server, fuse+q4_1', 'llama-server', 'vLLM CPU', 'vLLM CPU, all cores']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from labkit.core.doors import check_record
from labkit.engines.install import MAKE_ENGINES, llama_server_installed, vllm_installed, vllm_python
from labkit.engines.llama_server import LlamaServerSettings, start_llama_server
from labkit.engines.vllm import DEFAULT_KV_CACHE_GIB, all_cores_env, preloads, start_vllm_server
from labkit.fast.allocator import allocator_settings
from labkit.launcher import ServerHandle
from labkit.serving.http.server import start_server
from labkit.serving.http.server_options import ServerOptions

MODEL = "smollm2-135m"
LABKIT_FLOAT32, FASTEST_LABKIT, LLAMA_SERVER = (
    "labkit server, float32",
    "labkit server, fuse+q4_1",
    "llama-server",
)
VLLM, VLLM_ALL_CORES = "vLLM CPU", "vLLM CPU, all cores"
VLLMS = (VLLM, VLLM_ALL_CORES)  # one peer at two thread settings: the aims take the better one
FASTEST = ("fuse", "q4_1")
# labkit float32 on oneDNN's matmul (labkit.fast.onednn_linear) rather than F.linear's MKL sgemm, which at a few
# rows is slow on a weight far larger than the caches. The engine's compiled decode step, measured in one process
# (idle 2-core AMD EPYC with AVX-512, medians of 30 steps), at 1 / 2 / 4 / 16 rows: F.linear 39-41 / 90-96 /
# 93 / 107 ms, onednn 34-39 / 40-50 / 48-56 / 76-82 ms; a prefill of 530-540 tokens 945 against 460-557 ms.
FLOAT32 = ("onednn",)
# labkit's servers keep KV blocks of 4 tokens: the prefix cache reuses whole blocks, and bench serve's prompts
# share a system prompt whose end falls inside a block. Measured in one process (fuse+q4_1, compiled, idle
# 2-core AMD EPYC, medians of 30 prompts in turns): the first token of a prompt after that shared prefix took
# 53.0 ms with blocks of 16 (34 tokens fed), 42.5 with 8 (26) and 35.8 with 4 (22); a decode step 6.4 ms
# with each. 16 requests of 64 tokens at once: 279 tokens/s with 4 against 269 with 16 (medians of 3).
BLOCK_SIZE = 4
# The engine's step on labkit's kernel against torch's int4 (eager, one engine step per batch size, 40 decode
# steps each, median, 2 cores, PASSIVE, under light load): 22.6 / 26.1 / 37.1 / 62.4 ms at 1 / 2 / 8 / 16
# rows against 24.3 / 28.6 / 48.9 / 78.9 ms, measured before the kernel took tiles of rows (faster since at 8+).
# labkit's server's OpenMP threads, chosen by measurement (idle 2-core AMD EPYC, fuse+q4_1 with its decode
# step compiled, 16 seats, 16 streamed requests of 32 tokens, the better of 2 runs, tokens/s at 1 / 2 / 8
# clients): PASSIVE 39.3 / 53.2 / 84.7; ACTIVE 70.5 / 86.8 / 101.4 (its spinning threads keep the HTTP
# thread off the cores); PASSIVE with GOMP_SPINCOUNT=10000, a spin of some microseconds before a worker
# sleeps, as llama.cpp's threads do, 77.7 / 95.8 / 115.3: the step's hundreds of parallel regions no
# longer wake a sleeping thread each, and the threads sleep between steps (labkit.serving.http.openmp_team).
LABKIT_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "10000"}
# labkit float32 at its best: its decode step compiled, as the fastest row's (idle 2-core Intel Xeon, one run,
# 16 streamed requests of 32 tokens, tokens/s at 1 / 2 / 8 / 16 clients): eager 25.8 / 39.8 / 81.4 / 121.3,
# compiled 36.3 / 55.7 / 98.2 / 145.4, fused projections and compiled 34.2 / 49.1 / 83.0 / 128.1.


def record_tag(server: str) -> str:
    """A server's name as a JSON record's name carries it.

    >>> record_tag("labkit server, fuse+q4_1"), record_tag("vLLM CPU, all cores")
    ('labkit_fuse_q4_1', 'vLLM_CPU_all_cores')
    """
    return (
        server.replace(" server", "").replace(", ", "_").replace("+", "_").replace(" ", "_").replace("-", "_")
    )


@dataclass(frozen=True)
class Contender:
    """One server of the comparison: how the table names it, what it runs with, and how to start it."""

    name: str
    settings: str
    start: Callable[[], ServerHandle]
    available: bool = True
    missing: str = ""
    model: str = MODEL


def labkit_settings(
    options: ServerOptions, weights: str = "float32 weights", wait_policy: str | None = None
) -> str:
    """What a labkit server runs with, as a table states it: started with LABKIT_ENV, or with only
    OMP_WAIT_POLICY=wait_policy."""
    check_record("options", options, "ServerOptions (labkit.serving.http.server)", of=ServerOptions)
    step = "decode step compiled per batch size" if options.compile else "eager"
    env = LABKIT_ENV if wait_policy is None else {"OMP_WAIT_POLICY": wait_policy}
    variables = " ".join(f"{k}={v}" for k, v in env.items())
    blocks = 16 if options.block_size is None else options.block_size
    return (
        f"{weights}, {step}, {options.max_num_seqs} seats, {options.scheduling()}, prefix cache in blocks of "
        f"{blocks} tokens, {torch.get_num_threads()} torch threads, {variables}, {allocator_settings()}"
    )


def labkit_contender(name: str, options: ServerOptions, weights: str) -> Contender:
    """labkit's server with `options`, started with LABKIT_ENV."""
    return Contender(
        name,
        labkit_settings(options, weights),
        lambda: start_server(
            options.model,
            max_num_seqs=options.max_num_seqs,
            optimize=options.optimize,
            chunked_prefill=options.chunked_prefill,
            max_num_batched_tokens=options.max_num_batched_tokens,
            compile=options.compile,
            block_size=options.block_size,
            env=LABKIT_ENV,
        ),
    )


def vllm_settings(wait_policy: str | None = None, all_cores: bool = False) -> str:
    """What `start_vllm_server(wait_policy=wait_policy, all_cores=all_cores)` runs with, as a table states it."""
    threads = (
        " ".join(f"{k}={v}" for k, v in all_cores_env().items()) + " (an OpenMP thread on every core)"
        if all_cores
        else "1 OpenMP thread with 1 core reserved for its API server (its default binding)"
    )
    libraries = [path.name for path in preloads(vllm_python())]
    return (
        f"vllm-cpu 0.32.0, float32, --enforce-eager, {DEFAULT_KV_CACHE_GIB} GiB KV cache, its server defaults "
        f"(max_num_seqs 128, 2048 tokens a step, chunked prefill, prefix cache), {threads}"
        + ("" if wait_policy is None else f", OMP_WAIT_POLICY={wait_policy}")
        + (f", LD_PRELOAD={':'.join(libraries)} (its docs' advice)" if libraries else ", nothing preloaded")
    )


def contenders(seats: int, quick: bool = False, vllm: bool | None = None) -> list[Contender]:
    """The servers, with `seats` requests decoding at once in labkit and llama-server (vLLM: its default of
    128). quick runs labkit's servers eager (compiling their decode steps at start-up takes a minute or more
    on 2 cores; the compiled step has tests of its own), llama-server with OMP_WAIT_POLICY=PASSIVE (its
    threads sleep when they wait: under OpenMP's default they spin, which on a busy machine stretched a
    4-token quick level to a minute) and, unless vllm is True, leaves vLLM out (its start alone takes a
    minute); vllm None: vLLM only when not quick."""
    wait_policy = "PASSIVE" if quick else None
    llama = LlamaServerSettings(MODEL, slots=seats, wait_policy=wait_policy)
    servers = [
        labkit_contender(
            LABKIT_FLOAT32,
            ServerOptions(
                MODEL, max_num_seqs=seats, optimize=FLOAT32, compile=not quick, block_size=BLOCK_SIZE
            ),
            "float32 weights packed for oneDNN's matmul",
        ),
        labkit_contender(
            FASTEST_LABKIT,
            ServerOptions(
                MODEL, max_num_seqs=seats, optimize=FASTEST, compile=not quick, block_size=BLOCK_SIZE
            ),
            "fused projections, Q4_1 weights x Q8_1 activations on labkit's kernel, head Q8_0",
        ),
        Contender(
            LLAMA_SERVER,
            f"llama.cpp as llama-cpp-python 0.3.36 vendors it, {llama.describe()}",
            lambda: start_llama_server(MODEL, slots=seats, wait_policy=wait_policy),
            llama_server_installed(),
            f"not built. {MAKE_ENGINES}",
        ),
    ]
    if (not quick) if vllm is None else vllm:
        missing = f"not installed. {MAKE_ENGINES}"
        servers += [
            Contender(VLLM, vllm_settings(), start_vllm_server, vllm_installed(), missing),
            Contender(
                VLLM_ALL_CORES,
                vllm_settings(all_cores=True),
                lambda: start_vllm_server(all_cores=True),
                vllm_installed(),
                missing,
            ),
        ]
    return servers
