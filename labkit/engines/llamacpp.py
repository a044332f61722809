"""llama.cpp next to labkit: the same GGUF file in-process (`Llama`) and behind its OpenAI-style server.

The embedded models ship as GGUF files (SmolLM2: Q4_1), which llama.cpp runs as they are: its 4-bit
matmuls multiply the packed weights with activations quantized to 8 bits on the fly, where labkit and
transformers run the float32 weights dequantized from the same file (notebook 08).

    >>> llm = load_llamacpp("smollm2-135m")
    >>> llm.create_chat_completion([{"role": "user", "content": "Hi"}], temperature=0, max_tokens=8)
    >>> with start_llamacpp_server() as server:                  # OpenAI API at server.url + "/v1"
    ...     ...
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from labkit.core.arguments import check_int, check_seconds
from labkit.engines.install import require_llamacpp
from labkit.models.registry import known_model
from labkit.serving.http.server import ServerHandle, check_address, launch, require_free_port

DEFAULT_CONTEXT = 2048
MIN_CONTEXT = 16  # tokens: below this no chat prompt fits
READY_TIMEOUT_S = 60.0  # measured: the server answers /v1/models about 3 s after launch


def default_threads() -> int:
    """One compute thread per two cores, as llama-cpp-python itself chooses (at least one)."""
    return max((os.cpu_count() or 2) // 2, 1)


def gguf_path(model: str) -> Path:
    """The GGUF file of an embedded model (a clear error names the package to install when it is missing)."""
    return known_model(model).locate_gguf()


def load_llamacpp(model: str = "smollm2-135m", n_ctx: int = DEFAULT_CONTEXT, n_threads: int | None = None,
                  logits_all: bool = False):
    """llama.cpp's `Llama` on an embedded model's GGUF file, in this process (about 1 s).

    logits_all=True keeps every position's logits (llm.scores[:n_tokens, :vocab]) for comparisons.

        >>> llm = load_llamacpp(n_threads=2)
        >>> llm.tokenize(b"Hello")
        [19556]
    """
    check_llamacpp_options(model, n_ctx, n_threads)
    require_llamacpp()
    from llama_cpp import Llama

    threads = n_threads or default_threads()
    return Llama(model_path=str(gguf_path(model)), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                 logits_all=logits_all, verbose=False)


def server_environment() -> dict[str, str]:
    """This environment without OMP_WAIT_POLICY, so the server's OpenMP threads spin briefly, then sleep.

    ggml makes its threads meet at a barrier after every operation, hundreds of times per token. labkit
    sets OMP_WAIT_POLICY=PASSIVE for torch (sleeping waiters save a busy machine), but then every barrier
    waits for a thread to wake up. Measured on 2 idle cores, 2 threads, 64-token answers through the
    server: PASSIVE 43-47 tokens/s, OpenMP's default 50-62, ACTIVE 58-66 but spinning a whole core while
    idle. A notebook kernel's OpenMP keeps the policy it started with, so `load_llamacpp` runs passive.
    """
    return {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}


def llamacpp_server_command(model: str, host: str, port: int, n_ctx: int, n_threads: int) -> list[str]:
    """`python -m llama_cpp.server ...` for one model, served under its labkit name.

    interrupt_requests is off: by default a new request cancels the stream in flight, so of several
    concurrent streamed clients only the last would get a whole answer.
    """
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path(model)), "--model_alias", model,
            "--host", host, "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(n_threads),
            "--n_threads_batch", str(n_threads), "--interrupt_requests", "False", "--verbose", "False"]


def start_llamacpp_server(model: str = "smollm2-135m", port: int = 0, n_ctx: int = DEFAULT_CONTEXT,
                          n_threads: int | None = None, host: str = "127.0.0.1",
                          timeout: float = READY_TIMEOUT_S) -> ServerHandle:
    """Start llama-cpp-python's server on `model`'s GGUF file; return once /v1/models answers. Every
    argument is checked first: a bad one raises a ValueError naming it, and no process starts.

        >>> with start_llamacpp_server(n_threads=1) as server:
        ...     openai.OpenAI(base_url=server.url + "/v1", api_key="none").models.list()
    """
    check_llamacpp_options(model, n_ctx, n_threads)
    check_address(host, port)
    check_seconds("timeout", timeout)
    require_llamacpp()
    port = require_free_port(host, port)
    command = llamacpp_server_command(model, host, port, n_ctx, n_threads or default_threads())
    return launch(command, "llamacpp-server-", f"http://{host}:{port}", timeout, health_path="/v1/models",
                  env=server_environment(), own_session=True)


def check_llamacpp_options(model: object, n_ctx: object, n_threads: object) -> None:
    """A clear error unless model is an embedded model with a GGUF file, n_ctx at least 16 tokens and
    n_threads None (one per two cores) or at least 1."""
    gguf_path(model)
    check_int("n_ctx", n_ctx, minimum=MIN_CONTEXT)
    if n_threads is not None:
        check_int("n_threads", n_threads, minimum=1)
