"""llama.cpp next to labkit: the same GGUF file in-process (`Llama`); its server is labkit.engines.llama_server.

The embedded models ship as GGUF files (SmolLM2: Q4_1), which llama.cpp runs as they are: its 4-bit
matmuls multiply the packed weights with activations quantized to 8 bits on the fly, where labkit and
transformers run the float32 weights dequantized from the same file (notebook 08).

    >>> llm = load_llamacpp("smollm2-135m")
    >>> llm.create_chat_completion([{"role": "user", "content": "Hi"}], temperature=0, max_tokens=8)
"""

from __future__ import annotations

import os
from pathlib import Path

from labkit.core.arguments import check_int
from labkit.engines.install import require_llamacpp
from labkit.models.registry import known_model

DEFAULT_CONTEXT = 2048
MIN_CONTEXT = 16  # tokens: below this no chat prompt fits


def default_threads() -> int:
    """One compute thread per two cores, as llama-cpp-python itself chooses (at least one)."""
    return max((os.cpu_count() or 2) // 2, 1)


def gguf_path(model: str) -> Path:
    """The GGUF file of an embedded model (a clear error names the package to install when it is missing)."""
    return known_model(model).locate_gguf()


def load_llamacpp(
    model: str = "smollm2-135m",
    n_ctx: int = DEFAULT_CONTEXT,
    n_threads: int | None = None,
    logits_all: bool = False,
    flash_attn: bool = False,
):
    """llama.cpp's `Llama` on an embedded model's GGUF file, in this process (about 1 s).

    logits_all=True keeps every position's logits (llm.scores[:n_tokens, :vocab]) for comparisons.
    flash_attn=True: attention as llama-server runs it by default ('auto', on for the CPU); its sums run in
    another order, so a near-tie can go the other way than without it.

        >>> llm = load_llamacpp(n_threads=2)
        >>> llm.tokenize(b"Hello")
        [19556]
    """
    check_llamacpp_options(model, n_ctx, n_threads)
    for name, flag in (("logits_all", logits_all), ("flash_attn", flash_attn)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be True or False, got {flag!r}.")
    require_llamacpp()
    from llama_cpp import Llama

    threads = n_threads or default_threads()
    return Llama(
        model_path=str(gguf_path(model)),
        n_ctx=n_ctx,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=logits_all,
        flash_attn=flash_attn,
        verbose=False,
    )


def server_environment() -> dict[str, str]:
    """This environment without OMP_WAIT_POLICY, so the server's OpenMP threads spin briefly, then sleep.

    ggml makes its threads meet at a barrier after every operation, hundreds of times per token. labkit
    sets OMP_WAIT_POLICY=PASSIVE for torch (sleeping waiters save a busy machine), but then every barrier
    waits for a thread to wake up. Measured on 2 idle cores, 2 threads, 64-token answers through
    llama-cpp-python's server: PASSIVE 43-47 tokens/s, OpenMP's default 50-62, ACTIVE 58-66 but spinning a whole core while
    idle. A notebook kernel's OpenMP keeps the policy it started with, so `load_llamacpp` runs passive.
    """
    return {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}


def check_llamacpp_options(model: object, n_ctx: object, n_threads: object) -> None:
    """A clear error unless model is an embedded model with a GGUF file, n_ctx at least 16 tokens and
    n_threads None (one per two cores) or at least 1."""
    gguf_path(model)
    check_int("n_ctx", n_ctx, minimum=MIN_CONTEXT)
    if n_threads is not None:
        check_int("n_threads", n_threads, minimum=1)
