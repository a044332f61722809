"""What a step dispatches, counted: the aten ops of an eager step, the kernel calls of a compiled one.

labkit.fast.cost multiplies these counts by a measured time per op (or per kernel call) to predict a
step's fixed costs.

    >>> count_ops(lambda: torch.ones(3) + 1)
    2
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched inside its `with` block (views and in-place writes included)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def count_ops(run: Callable[[], object]) -> int:
    """The number of aten ops one call of run() dispatches.

    >>> count_ops(lambda: torch.ones(3) + 1)
    2
    """
    with torch.no_grad(), OpCounter() as counter:
        run()
    return counter.count


KERNEL_CALL = re.compile(
    r"^\s+(?:\w+ = )?(?:cpp_fused_\w+|extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?)\(", re.M
)


def kernel_calls(generated_code: str) -> int:
    """The kernel calls in inductor's generated wrapper for CPU: its fused C++ loops (cpp_fused_...) and the
    ops it calls outside them (extern_kernels..., torch.ops...), counted in `def call` only.

        >>> kernel_calls("def call(args):\n    cpp_fused_add_0(buf0)\n    buf1 = torch.ops.aten.mm.default(a, b)\n")
        2
    """
    body = generated_code[generated_code.find("def call(") :]
    end = re.search(r"\n\S", body)  # the next top-level statement ends the function
    return len(KERNEL_CALL.findall(body[: end.start()] if end else body))
