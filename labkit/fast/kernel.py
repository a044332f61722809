"""Building and loading labkit's own CPU kernels, once per machine: the Q4_1 x Q8_1 matrix product
(q4_kernel.cpp) and the serving engine's batch-invariant attention (attention_kernel.cpp), in one library.

The C++ sources are compiled at first use with torch's extension builder (`-O3`, no `-march=native`:
each SIMD path carries its own target attribute, so one build runs on AVX2-only and AVX-512 CPUs
alike), into labkit's cache: `labkit.cache_dir() / "extensions"`, one folder per source and torch
version. A later process finds the .so there and loads it in milliseconds. Loading registers the op
`torch.ops.labkit.q4_1_linear(x, codes, scales, minimums, path="auto")` and its twin for Q8_0
weights, `torch.ops.labkit.q8_0_linear(x, codes, scales, path="auto")`; the same products on weights
repacked 16 rows at a time, `q4_1x16_linear` and `q8_0x16_linear` (labkit.fast.repack,
q4_repack_kernel.cpp: what labkit's quantized layers run); and
`torch.ops.labkit.row_attention(q, k, v, mask, scale, path="auto")` (labkit.fast.row_attention), its
twin reading the past keys in place from the serving engine's pool, `paged_row_attention`, and the
decode attention over a quantized KV cache's codes, `torch.ops.labkit.kv_code_attention`
(labkit.fast.code_attention, kv_code_attention.cpp) and its writer `torch.ops.labkit.kv_code_write`
(kv_code_write.cpp: a step's new rows quantized into the cache in one call), each attention op with
a fake (shape-only) implementation so `torch.compile(fullgraph=True)` traces through them.

When the build fails (no compiler, no ninja, a compile error) `load_kernel()` says why, warns once,
and labkit's Q41Linear falls back to torch's kernels: nothing crashes.

    >>> status = load_kernel()
    >>> status.available, status.path, status.paths
    (True, 'avx512', ('scalar', 'avx2', 'avx512'))
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from labkit.models.registry import cache_dir

SOURCES = tuple(
    Path(__file__).with_name(name)
    for name in (
        "q4_kernel.cpp",
        "q4_repack_kernel.cpp",
        "attention_kernel.cpp",
        "kv_code_attention.cpp",
        "kv_code_write.cpp",
    )
)
HEADERS = (Path(__file__).with_name("q8_activations.h"),)  # included by the sources: part of the build's key
CFLAGS = ("-O3",)  # never -march=native: the cached build may move to another CPU
OPENMP_FLAGS = ("-fopenmp",)  # at::parallel_for is a header template: without it, it runs on one thread
PATHS = ("scalar", "avx2", "avx512")  # every SIMD path the kernel has, slowest first
PATH_ENV_VAR = "LABKIT_Q4_PATH"  # force one path: scalar, avx2 or avx512 (default: the fastest this CPU runs)
BUILD_ERRORS = (RuntimeError, OSError, ImportError, subprocess.SubprocessError)  # what a failed build raises


@dataclass(frozen=True)
class KernelStatus:
    """Whether labkit's Q4_1 kernel runs in this process, and how."""

    available: bool  # True when torch.ops.labkit.q4_1_linear can be called
    path: str | None  # the SIMD path q4_1_linear uses: "avx512", "avx2" or "scalar"; None if unavailable
    paths: tuple[str, ...] = ()  # every path this CPU runs, slowest first
    reason: str = ""  # why the kernel is unavailable ("" when it is available)
    library: str = ""  # the loaded .so file


def openmp_flags() -> tuple[str, ...]:
    """-fopenmp where torch runs at::parallel_for on OpenMP (its pip builds for Linux), else nothing.
    The extension then shares torch's already loaded libgomp, so torch.set_num_threads applies."""
    return OPENMP_FLAGS if torch.backends.openmp.is_available() else ()


def build_directory() -> Path:
    """Where the kernel for this source, these flags and this torch is built: one folder per version."""
    key = "|".join(
        [
            *(source.read_text(encoding="utf-8") for source in SOURCES + HEADERS),
            *CFLAGS,
            *openmp_flags(),
            torch.__version__,
            sys.version,
            platform.machine(),
        ]
    )
    return cache_dir() / "extensions" / f"labkit_q4_{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def build_library() -> Path:
    """Compile the kernels' sources (tens of seconds) unless their .so is already in the cache; returns its path.

    Raises what torch's builder raises: RuntimeError for a compile error or no ninja, OSError for a
    missing source or compiler.
    """
    for source in SOURCES + HEADERS:
        if not source.is_file():
            raise FileNotFoundError(f"the kernel's source {source} is missing from this installation")
    compiler = os.environ.get("CXX", "c++")
    folder = build_directory()
    library = folder / f"{folder.name}.so"
    if library.is_file():  # built before: loading it takes milliseconds
        return library
    if shutil.which(compiler) is None:
        raise FileNotFoundError(
            f"no C++ compiler: {compiler!r} ($CXX, or c++ by default) is not on the PATH; "
            "install g++ (e.g. apt-get install g++)"
        )
    from torch.utils import cpp_extension  # imports setuptools: only when compiling

    folder.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # torch's remarks on the compiler: a failure says what went wrong anyway
        warnings.simplefilter("ignore")
        cpp_extension.load(
            name=folder.name,
            sources=[str(source) for source in SOURCES],
            extra_cflags=[*CFLAGS, *openmp_flags()],
            extra_ldflags=list(openmp_flags()),
            build_directory=str(folder),
            is_python_module=False,
            verbose=False,
        )
    return library


@functools.cache
def register_fake() -> None:
    """The shape-only implementations torch.compile traces with: y [M, N] in x's dtype, and attention's
    output in q's shape. Once per process."""

    @torch.library.register_fake("labkit::q4_1_linear")
    def q4_1_linear_fake(x, codes, scales, minimums, path="auto"):
        return x.new_empty((x.shape[0], codes.shape[0]))

    @torch.library.register_fake("labkit::q8_0_linear")
    def q8_0_linear_fake(x, codes, scales, path="auto"):
        return x.new_empty((x.shape[0], codes.shape[0]))

    @torch.library.register_fake("labkit::q4_1x16_linear")
    def q4_1x16_linear_fake(x, codes, scales, minimums, n, path="auto"):
        return x.new_empty((x.shape[0], n))

    @torch.library.register_fake("labkit::q8_0x16_linear")
    def q8_0x16_linear_fake(x, codes, scales, n, path="auto"):
        return x.new_empty((x.shape[0], n))

    @torch.library.register_fake("labkit::row_attention")
    def row_attention_fake(q, k, v, mask, scale, path="auto"):
        return q.new_empty(q.shape)

    @torch.library.register_fake("labkit::paged_row_attention")
    def paged_row_attention_fake(q, k_pool, v_pool, read_slots, k_new, v_new, mask, scale, path="auto"):
        return q.new_empty(q.shape)

    @torch.library.register_fake("labkit::kv_code_attention")
    def kv_code_attention_fake(
        q, k_codes, k_scales, k_min, v_codes, v_scales, v_min, mask, scale, rotate=False, path="auto"
    ):
        return q.new_empty(q.shape)


def chosen_path(paths: tuple[str, ...]) -> str:
    """$LABKIT_Q4_PATH if set (it must be one of `paths`), else the fastest path this CPU runs."""
    wanted = os.environ.get(PATH_ENV_VAR, "").strip().lower()
    if not wanted:
        return paths[-1]
    if wanted not in paths:
        raise ValueError(
            f"{PATH_ENV_VAR}={wanted!r}: this CPU runs {', '.join(paths)} "
            f"(the kernel has {', '.join(PATHS)}). Unset it to use the fastest."
        )
    return wanted


def short_reason(error: BaseException, limit: int = 600) -> str:
    """`Type: message`, cut to `limit` characters: a compiler's `error:` lines if it printed any."""
    lines = str(error).splitlines()
    errors = [line.strip() for line in lines if "error:" in line or "not found" in line]
    message = " | ".join(errors[:3]) if errors else " ".join(" ".join(lines).split())
    return f"{type(error).__name__}: {message if len(message) <= limit else message[:limit] + '...'}"


LOADED: dict[str, KernelStatus] = {}  # this process's status, once loaded (a dict torch.compile can read)


def load_kernel(reload: bool = False) -> KernelStatus:
    """Build (first time on this machine) and load the kernel, once per process; never raises for a
    failed build: the status says why, and one warning says labkit falls back to torch's kernels.

    reload=True tries again (tests use it after changing the environment). Raises ValueError only
    for a $LABKIT_Q4_PATH this CPU cannot run.

        >>> load_kernel().path
        'avx512'
    """
    if reload or "status" not in LOADED:
        LOADED["status"] = try_loading()
    return LOADED["status"]


def try_loading() -> KernelStatus:
    """One attempt at building and loading: the status, and a warning if the kernel is unavailable."""
    try:
        library = build_library()
        torch.ops.load_library(str(library))
    except BUILD_ERRORS as error:
        reason = short_reason(error)
        warnings.warn(
            f"labkit's Q4_1 kernel is unavailable, so labkit falls back to torch's kernels "
            f"(dequantize, then matmul). Reason: {reason}",
            RuntimeWarning,
            stacklevel=3,
        )
        return KernelStatus(available=False, path=None, reason=reason)
    register_fake()
    paths = tuple(torch.ops.labkit.q4_1_paths().split(","))
    return KernelStatus(available=True, path=chosen_path(paths), paths=paths, library=str(library))
