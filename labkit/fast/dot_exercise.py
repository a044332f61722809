"""Notebook 13's capstone: the dot product of one 4-bit group, its loop written in C++ by the student.

`TEMPLATE` is one Q4_1 x Q8_1 matrix-vector product (labkit.fast.q4_linear's format, llama.cpp's
arithmetic) as plain scalar C++, on one thread: for each weight row n and group g of 32 inputs it
calls `group_dot(c, q)`, the integer dot product of the group's 32 four-bit codes with the 32 int8
activations, then scales the sum and adds the minimum's term. The student writes the body of
`group_dot`: declare the sum, loop over the group's 16 bytes, and return it.

    byte c[j] (j = 0..15) holds the code of input j in its low nibble and of input j + 16 in its
    high nibble; q[0..31] are the int8 activations.

`build_matvec(group_dot)` compiles the template around it with torch.utils.cpp_extension.load_inline
(-O3, so the compiler vectorises the loop for the CPU's baseline SIMD), into labkit's cache: the
same source compiles once per machine. It raises CompilerMissing where no C++ compiler or ninja is
installed, and CompileError for code that does not compile: the compiler's first error and the line of
the student's code it points at, not the build log (whose later errors often follow from the first).
`race_with_kernel` then times the student's loop against labkit's SIMD kernel on one weight.

    >>> matvec = build_matvec(SHAPE_OF_AN_ANSWER)      # see the notebook's exercise for what goes inside
    >>> matvec(weight, x)          # weight: Q41Weight [N, K], x [K] float32 -> y [N]
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from labkit.core.doors import check_callable, check_record, check_tensor
from labkit.fast.kernel import load_kernel
from labkit.fast.q4_linear import Q41Weight, q4_1_linear, quantize_q4_1, quantize_q8_1
from labkit.fast.threads import using_threads
from labkit.models.registry import cache_dir
from labkit.timing import median_seconds

TEMPLATE = r"""
#include <cstdint>

// The integer dot product of one group: 16 bytes c[0..15] hold its 32 four-bit codes (byte j: input j's
// code in its low nibble, input j + 16's in its high nibble), q[0..31] its 32 int8 activations.
static inline int32_t group_dot(const uint8_t* c, const int8_t* q) {
  // ---- your code ----
%s
  // -------------------
}

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
      sum += d[n * groups + g] * step_x[g] * group_dot(c, q) + m[n * groups + g] * sum_x[g];
    }
    out[n] = sum;
  }
  return y;
}
"""


class CompilerMissing(RuntimeError):
    """No C++ compiler or no ninja on this machine: the exercise cannot be built here."""


class CompileError(RuntimeError):
    """The student's code does not compile: the compiler's first error, at its line of the code.

    >>> build_matvec("int32_t dot = 0;\nreturn dot * w;")
    Traceback (most recent call last):
    CompileError: group_dot does not compile, line 2: error: 'w' was not declared in this scope
        return dot * w;
    """


CODE_MARKER = "// ---- your code ----"  # TEMPLATE's line just above the student's first line
# gcc's and clang's "file:line:col: error: ..."
COMPILER_ERROR = re.compile(r"main\.cpp:(\d+):\d+: error: (.+)")


def first_compile_error(build_log: str, main_cpp: str, code: str) -> str | None:
    """The compiler's first error in build_log, placed on its line of the student's code (None if it
    printed none). main_cpp is the source the compiler read (load_inline's main.cpp: TEMPLATE with a prelude)."""
    found = COMPILER_ERROR.search(build_log)
    if found is None:
        return None
    marker = next(i for i, line in enumerate(main_cpp.splitlines(), 1) if CODE_MARKER in line)
    line, message = int(found.group(1)) - marker, found.group(2).replace("\u2018", "'").replace("\u2019", "'")
    lines = code.splitlines()
    if 1 <= line <= len(lines):
        return f"group_dot does not compile, line {line}: error: {message}\n    {lines[line - 1].strip()}"
    return (
        f"group_dot does not compile: error: {message} (just after your code: check its braces, "
        "brackets and semicolons, and that it ends by returning the sum)"
    )


def missing_tools() -> list[str]:
    """The build tools load_inline needs that are not on the PATH ([] when it can build)."""
    compiler = os.environ.get("CXX", "c++")
    return [tool for tool in (compiler, "ninja") if shutil.which(tool) is None]


def build_matvec(group_dot: str) -> Callable[[Q41Weight, torch.Tensor], torch.Tensor]:
    """Compile TEMPLATE with `group_dot` (the C++ statements of its body) and return matvec(weight, x) ->
    y [N] float32. x is a float32 vector [K]; it is rounded to Q8_1 exactly as labkit's kernel rounds it.
    """
    if not isinstance(group_dot, str) or not group_dot.strip():
        raise ValueError(
            "group_dot must be the C++ statements of its body in a string: declare the sum, loop, return it."
        )
    missing = missing_tools()
    if missing:
        raise CompilerMissing(
            f"{' and '.join(missing)} not found on the PATH: install g++ and ninja to build it"
        )
    source = TEMPLATE % group_dot
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
                extra_cflags=["-O3", "-Werror=return-type"],  # a body that forgets to return fails
                build_directory=str(folder),
                verbose=False,
            )
        except RuntimeError as build_failed:
            main_cpp = folder / "main.cpp"
            first = main_cpp.exists() and first_compile_error(
                str(build_failed), main_cpp.read_text(), group_dot
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


@dataclass(frozen=True)
class LoopRace:
    """The student's compiled loop against labkit's SIMD kernel on the same Q4_1 weight, one thread."""

    megabytes: float  # the Q4_1 weight's size: codes, scales and minimums
    yours: float  # bytes of it read per second by the student's loop (median of the calls)
    kernel: float  # the same by labkit's kernel
    kernel_path: str  # which of labkit's kernels ran (AVX-512, AVX2 or plain C)

    @property
    def slower(self) -> float:
        """How many times slower the student's loop is than labkit's kernel."""
        return self.kernel / self.yours

    def __str__(self) -> str:
        return (
            f"a Q4_1 weight of {self.megabytes:.1f} MB, one thread, GB/s read (median of calls):\n"
            f"  your loop, -O3 for any x86-64    {self.yours / 1e9:5.1f}\n"
            f"  labkit's kernel ({self.kernel_path}){' ' * max(0, 14 - len(self.kernel_path))}"
            f"{self.kernel / 1e9:5.1f}  ({self.slower:.1f}x yours)"
        )


def race_with_kernel(group_dot: str, weight: torch.Tensor) -> LoopRace:
    """Your `group_dot` (compiled by the checker: loaded from labkit's cache) against labkit's kernel on
    `weight` [N, K] float32, quantized to Q4_1, one thread each. Use a weight larger than the caches.

    >>> print(race_with_kernel(GROUP_DOT, hf_model.lm_head.weight.detach()))   # [49152, 576]
    """
    head = quantize_q4_1(check_tensor("weight", weight, "[N, K] float32, K a multiple of 32", dims=(2,)))
    yours = build_matvec(group_dot)
    with using_threads(1):
        plain = matvec_bandwidth(yours, head)
        simd = matvec_bandwidth(lambda w, x: q4_1_linear(x[None], w), head)
    return LoopRace(head.nbytes / 1e6, plain, simd, load_kernel().path)
