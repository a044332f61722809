"""Where the time of one decode step goes, from torch's profiler: matmul kernels, attention, the rest.

At batch 1 the matmul kernels are the part that reads every weight (labkit.fast.cost says how close
to the memory's pace); attention over a short context is small; everything else (norms, rotary
embeddings, casts, views, the KV-cache writes) is per-op overhead that does not shrink when the
weights do. The profiler's self CPU time of
each op, summed by kind, shows the split; the Python between ops is in no op, so it is left out.

    >>> decoder = StaticDecoder(model, max_length=128)
    >>> step_breakdown(decoder)
    {'matmul kernels': 0.71, 'attention': 0.06, 'everything else': 0.23}
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.profiler import ProfilerActivity, profile

from labkit.core.arguments import check_int
from labkit.core.doors import check_record
from labkit.fast.static import StaticDecoder

MATMUL_OPS = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::_weight_int8pack_mm",
    "aten::_weight_int4pack_mm_for_cpu",
)
ATTENTION_OPS = (
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_attention_math",
)
KINDS = ("matmul kernels", "attention", "everything else")


def kind_of(op_name: str) -> str:
    """The kind (one of KINDS) an aten op's time counts as.

    >>> kind_of("aten::_weight_int4pack_mm_for_cpu")
    'matmul kernels'
    """
    if op_name in MATMUL_OPS:
        return KINDS[0]
    return KINDS[1] if op_name in ATTENTION_OPS else KINDS[2]


@contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null for the block: the profiler's C++ side prints a
    "USDT ... profiler_start / profiler_stop" line at each start and stop, whatever the log level."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def step_breakdown(decoder: StaticDecoder, steps: int = 8, warmup: int = 3) -> dict[str, float]:
    """Fractions of one eager decode step's profiled CPU time by kind (they sum to 1), over `steps` steps.

    The decoder runs a short prompt first; the profiled steps continue it. Times are self CPU time
    (an op's own time, not its children's), summed over every op the profiler records.
    """
    check_record("decoder", decoder, "a StaticDecoder (labkit.fast.static)", of=StaticDecoder)
    check_int("steps", steps, minimum=1)
    check_int("warmup", warmup, minimum=0)
    if 4 + warmup + steps > decoder.max_length:
        raise ValueError(
            f"The decoder holds {decoder.max_length} tokens; the profile needs {4 + warmup + steps}."
        )
    token = torch.tensor([[decoder.prefill([1, 2, 3, 4])]], device=decoder.model.device)
    positions = iter(range(4, 4 + warmup + steps))
    with torch.no_grad():
        for _ in range(warmup):
            decoder.decode(token, torch.tensor([next(positions)]))
        with quiet_native_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                decoder.decode(token, torch.tensor([next(positions)]))
    totals = dict.fromkeys(KINDS, 0.0)
    for event in prof.key_averages():
        totals[kind_of(event.key)] += event.self_cpu_time_total
    whole = sum(totals.values())
    return {kind: seconds / whole for kind, seconds in totals.items()}
