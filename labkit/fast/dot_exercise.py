"""Notebook 13's capstone: the inner loop of the 4-bit dot product, written in C++ by the student.

`TEMPLATE` is one Q4_1 x Q8_1 matrix-vector product (labkit.fast.q4_linear's format, llama.cpp's
arithmetic) as plain scalar C++, on one thread: for each weight row n and group g of 32 inputs it
sums the integer products of the group's 32 four-bit codes with the 32 int8 activations, then
scales the sum and adds the minimum's term. The student writes the body of the innermost loop:

    byte c[j] (j = 0..15) holds the code of input j in its low nibble and of input j + 16 in its
    high nibble; add both codes' products with q[j] and q[j + 16] to `dot`.

`build_matvec(inner_loop)` compiles the template around it with torch.utils.cpp_extension.load_inline
(-O3, so the compiler vectorises the loop for the CPU's baseline SIMD), into labkit's cache: the
same source compiles once per machine. It raises CompilerMissing where no C++ compiler or ninja is
installed, and CompileError for code that does not compile: the compiler's first error and the line of
`inner_loop` it points at, not the build log (whose later errors often follow from the first).

    >>> matvec = build_matvec("dot += (c[j] & 15) * q[j] + (c[j] >> 4) * q[j + 16];")
    >>> matvec(weight, x)          # weight: Q41Weight [N, K], x [K] float32 -> y [N]
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import warnings
from collections.abc import Callable

import torch

from labkit.core.doors import check_callable, check_record
from labkit.fast.q4_linear import Q41Weight, quantize_q8_1
from labkit.models.registry import cache_dir
from labkit.timing import median_seconds

TEMPLATE = r"""
#include <cstdint>

// y [N] = W [N, K] x: W in Q4_1 (codes [N, K/2], scales and minimums float32 [N, G]), x in Q8_1
// (qx int8 [K], dx and sx float32 [G]), G = K / 32 groups.
torch::Tensor matvec(torch::Tensor codes, torch::Tensor scales, torch::Tensor minimums,
                     torch::Tensor qx, torch::Tensor dx, torch::Tensor sx) {
  const int64_t rows = codes.size(0), groups = scales.size(1);
  const uint8_t* all_codes = codes.data_ptr<uint8_t>();
  const int8_t* all_q = qx.data_ptr<int8_t>();
  const float* d = scales.data_ptr<float>();
  const float* m = minimums.data_ptr<float>();
  const float* step_x = dx.data_ptr<float>();
  const float* sum_x = sx.data_ptr<float>();
  torch::Tensor y = torch::empty({rows}, scales.options());
  float* out = y.data_ptr<float>();
  for (int64_t n = 0; n < rows; ++n) {
    float sum = 0.f;
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* c = all_codes + (n * groups + g) * 16;  // this group's 16 bytes: 32 codes in 0..15
      const int8_t* q = all_q + g * 32;                       // this group's 32 int8 activations
      int32_t dot = 0;
      for (int j = 0; j < 16; ++j) {
        // ---- the inner loop ----
%s
        // ------------------------
      }
      sum += d[n * groups + g] * step_x[g] * dot + m[n * groups + g] * sum_x[g];
    }
    out[n] = sum;
  }
  return y;
}
"""


class CompilerMissing(RuntimeError):
    """No C++ compiler or no ninja on this machine: the exercise cannot be built here."""


class CompileError(RuntimeError):
    """The student's inner loop does not compile: the compiler's first error, at its line of inner_loop.

    >>> build_matvec("dot += c[j] * w;")
    Traceback (most recent call last):
    CompileError: inner_loop does not compile, line 1: error: 'w' was not declared in this scope
        dot += c[j] * w;
    """


INNER_LOOP_MARKER = "// ---- the inner loop ----"  # TEMPLATE's line just above the student's first line
COMPILER_ERROR = re.compile(
    r"main\.cpp:(\d+):\d+: error: (.+)"
)  # gcc's and clang's "file:line:col: error: ..."


def first_compile_error(build_log: str, main_cpp: str, inner_loop: str) -> str | None:
    """The compiler's first error in build_log, placed on its line of inner_loop (None if it printed none).
    main_cpp is the source the compiler read (load_inline's main.cpp: TEMPLATE with a prelude)."""
    found = COMPILER_ERROR.search(build_log)
    if found is None:
        return None
    marker = next(i for i, line in enumerate(main_cpp.splitlines(), 1) if INNER_LOOP_MARKER in line)
    line, message = int(found.group(1)) - marker, found.group(2).replace("\u2018", "'").replace("\u2019", "'")
    lines = inner_loop.splitlines()
    if 1 <= line <= len(lines):
        return f"inner_loop does not compile, line {line}: error: {message}\n    {lines[line - 1].strip()}"
    return (
        f"inner_loop does not compile: error: {message} (just after the inner loop: check its braces, "
        "brackets and semicolons)"
    )


def missing_tools() -> list[str]:
    """The build tools load_inline needs that are not on the PATH ([] when it can build)."""
    compiler = os.environ.get("CXX", "c++")
    return [tool for tool in (compiler, "ninja") if shutil.which(tool) is None]


def build_matvec(inner_loop: str) -> Callable[[Q41Weight, torch.Tensor], torch.Tensor]:
    """Compile TEMPLATE with `inner_loop` (C++ statements) and return matvec(weight, x) -> y [N] float32.

    x is a float32 vector [K]; it is rounded to Q8_1 exactly as labkit's kernel rounds it.
    """
    if not isinstance(inner_loop, str) or not inner_loop.strip():
        raise ValueError("inner_loop must be C++ statements in a string, e.g. 'dot += ...;'.")
    missing = missing_tools()
    if missing:
        raise CompilerMissing(
            f"{' and '.join(missing)} not found on the PATH: install g++ and ninja to build it"
        )
    source = TEMPLATE % inner_loop
    name = f"labkit_exercise_{hashlib.sha256(source.encode()).hexdigest()[:12]}"
    folder = cache_dir() / "extensions" / name
    folder.mkdir(parents=True, exist_ok=True)
    from torch.utils.cpp_extension import load_inline  # imports setuptools: only when compiling

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            module = load_inline(
                name=name,
                cpp_sources=[source],
                functions=["matvec"],
                extra_cflags=["-O3"],
                build_directory=str(folder),
                verbose=False,
            )
        except RuntimeError as build_failed:
            main_cpp = folder / "main.cpp"
            first = main_cpp.exists() and first_compile_error(
                str(build_failed), main_cpp.read_text(), inner_loop
            )
            if first:
                raise CompileError(first) from None
            raise

    def matvec(weight: Q41Weight, x: torch.Tensor) -> torch.Tensor:
        qx, dx, sx = quantize_q8_1(x.reshape(1, -1))
        return module.matvec(
            weight.codes,
            weight.scales.float(),
            weight.minimums.float(),
            qx[0].to(torch.int8),
            dx[0].contiguous(),
            sx[0].contiguous(),
        )

    return matvec


def matvec_bandwidth(matvec: Callable, weight: Q41Weight, repeats: int = 21) -> float:
    """Bytes of the weight read per second by matvec(weight, x) (median of `repeats` calls), in bytes/s."""
    check_callable("matvec", matvec, "a function matvec(weight, x) -> y, such as build_matvec returns")
    check_record("weight", weight, "a Q41Weight (labkit.fast.q4_linear.quantize_q4_1)", of=Q41Weight)
    x = torch.randn(weight.shape[1])
    return weight.nbytes / median_seconds(lambda: matvec(weight, x), repeats)
