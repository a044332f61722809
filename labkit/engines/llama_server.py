"""llama.cpp's own server, `llama-server`: parallel slots with continuous batching, on the shipped GGUF file.

`make engines` builds it once from the llama.cpp sources that llama-cpp-python 0.3.36 vendors (CMake,
-march=native for this CPU but no AMX, which a virtual machine may list and not allow; no web UI; shared
libraries that llama-cpp-python loads too), so the server and the in-process `Llama` of notebook 12 are
the same llama.cpp.

Each of `slots` requests decodes at once in one batch (`-np`, continuous batching on by default); each
slot holds `n_ctx` tokens (`-c` is the whole KV cache, split between the slots). Its OpenMP threads keep
their default wait policy (they spin briefly, then sleep: labkit.engines.llamacpp.server_environment)
unless `wait_policy` names one (notebook 12 times it under each), and it runs one thread per core unless
told otherwise.

    >>> with start_llama_server(slots=8) as server:              # ready in about a second
    ...     openai.OpenAI(base_url=server.url + "/v1", api_key="none").models.list()
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from labkit.core.arguments import check_int, check_seconds, check_text
from labkit.engines.install import require_llama_server
from labkit.engines.llamacpp import DEFAULT_CONTEXT, MIN_CONTEXT, gguf_path, server_environment
from labkit.fast.processes import check_policy
from labkit.launcher import ServerHandle, check_address, launch, require_free_port

DEFAULT_SLOTS = 4
READY_TIMEOUT_S = 60.0  # measured: /health answers about 1 s after launch


@dataclass(frozen=True)
class LlamaServerSettings:
    """What one llama-server runs with, as a benchmark table states it.

    >>> LlamaServerSettings("smollm2-135m", slots=8, n_ctx=2048, threads=2).describe()
    'Q4_1 GGUF, 8 slots x 2048 tokens, continuous batching, 2 threads, OpenMP default wait'
    >>> LlamaServerSettings("smollm2-135m", slots=8, threads=2, wait_policy="ACTIVE").describe().split(", ")[-1]
    'OMP_WAIT_POLICY=ACTIVE'
    """

    model: str
    slots: int = DEFAULT_SLOTS
    n_ctx: int = DEFAULT_CONTEXT  # tokens per slot
    threads: int | None = None  # None: one per core
    wait_policy: str | None = None  # OMP_WAIT_POLICY of its OpenMP threads; None: OpenMP's default
    speculative: tuple[str, ...] = ()  # its speculation flags: ("--spec-type", "ngram-simple", ...); (): none

    def __post_init__(self):
        check_text("model", self.model, example="'smollm2-135m'")
        check_int("slots", self.slots, minimum=1)
        check_int("n_ctx", self.n_ctx, minimum=MIN_CONTEXT)
        if self.threads is not None:
            check_int("threads", self.threads, minimum=1)
        if self.wait_policy is not None:
            check_policy(self.wait_policy)
        check_speculative_flags(self.speculative)

    @property
    def thread_count(self) -> int:
        return self.threads or os.cpu_count() or 1

    def describe(self) -> str:
        wait = "OpenMP default wait" if self.wait_policy is None else f"OMP_WAIT_POLICY={self.wait_policy}"
        return (
            f"{gguf_weights(self.model)} GGUF, {self.slots} slots x {self.n_ctx} tokens, continuous batching, "
            f"{self.thread_count} threads, {wait}"
            + (f", {' '.join(self.speculative)}" if self.speculative else "")
        )

    def environment(self) -> dict[str, str]:
        """The server's environment: this one's, with OMP_WAIT_POLICY set to wait_policy or left out."""
        env = server_environment()
        return env if self.wait_policy is None else {**env, "OMP_WAIT_POLICY": self.wait_policy}

    def command(self, host: str, port: int) -> list[str]:
        """The llama-server command line, the model served under its labkit name."""
        threads = str(self.thread_count)
        return [
            str(require_llama_server()),
            "--model",
            str(gguf_path(self.model)),
            "--alias",
            self.model,
            "--host",
            host,
            "--port",
            str(port),
            "--parallel",
            str(self.slots),
            "--ctx-size",
            str(self.slots * self.n_ctx),
            "--threads",
            threads,
            "--threads-batch",
            threads,
            "--no-webui",
            "--log-disable",
            *self.speculative,
        ]


def check_speculative_flags(flags: object) -> tuple[str, ...]:
    """flags, if they are a tuple of llama-server's speculation flags and their values (the first a
    `--spec-...` flag); else a ValueError saying so.

        >>> check_speculative_flags(("--spec-type", "ngram-simple", "--spec-draft-n-max", "4"))
        ('--spec-type', 'ngram-simple', '--spec-draft-n-max', '4')
    """
    if not isinstance(flags, tuple) or not all(isinstance(flag, str) for flag in flags):
        raise ValueError(f"speculative must be a tuple of llama-server flags (strings), got {flags!r}.")
    if flags and not flags[0].startswith("--spec-"):
        raise ValueError(
            f"speculative must start with one of llama-server's --spec-... flags, e.g. ('--spec-type', "
            f"'ngram-simple'), got {flags!r}."
        )
    return flags


def gguf_weights(model: str) -> str:
    """The weights' format as the GGUF file's name says it: "Q4_1" for SmolLM2's, "Q4_K_M" for Gemma's."""
    found = re.search(r"(?:I?Q\d\w*|BF16|F16|F32)(?=\.gguf$|$)", gguf_path(model).name, re.IGNORECASE)
    return found.group(0).upper() if found else "GGUF"


def start_llama_server(
    model: str = "smollm2-135m",
    slots: int = DEFAULT_SLOTS,
    n_ctx: int = DEFAULT_CONTEXT,
    n_threads: int | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    timeout: float = READY_TIMEOUT_S,
    wait_policy: str | None = None,
    speculative: tuple[str, ...] = (),
) -> ServerHandle:
    """Start `llama-server -np slots` on `model`'s GGUF file; return once /health answers 200. wait_policy:
    "PASSIVE" or "ACTIVE" for its OpenMP threads (None: OpenMP's default); speculative: its speculation
    flags, for example ("--spec-type", "ngram-simple"). Every argument is checked first: a bad one raises a
    ValueError naming it, and no process starts.

        >>> with start_llama_server(slots=4, n_threads=2, wait_policy="ACTIVE") as server:
        ...     openai.OpenAI(base_url=server.url + "/v1", api_key="none").models.list()
    """
    settings = check_llama_server_options(model, slots, n_ctx, n_threads, wait_policy, speculative)
    check_address(host, port)
    check_seconds("timeout", timeout)
    require_llama_server()
    port = require_free_port(host, port)
    return launch(
        settings.command(host, port),
        "llama-server-",
        f"http://{host}:{port}",
        timeout,
        health_path="/health",
        env=settings.environment(),
        own_session=True,
    )


def check_llama_server_options(
    model: object,
    slots: object,
    n_ctx: object,
    n_threads: object,
    wait_policy: object = None,
    speculative: object = (),
) -> LlamaServerSettings:
    """The settings, or a clear error unless model is an embedded model with a GGUF file, slots at least 1,
    n_ctx at least 16 tokens, n_threads None (one per core) or at least 1 and wait_policy None or one of
    labkit.fast.processes.WAIT_POLICIES."""
    gguf_path(model)
    check_int("slots", slots, minimum=1)
    check_int("n_ctx", n_ctx, minimum=MIN_CONTEXT)
    if n_threads is not None:
        check_int("n_threads", n_threads, minimum=1)
    if wait_policy is not None:
        check_policy(wait_policy)
    return LlamaServerSettings(
        model, slots, n_ctx, n_threads, wait_policy, check_speculative_flags(speculative)
    )
