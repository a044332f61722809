"""What this machine can do, measured once (notebook 07) and reused by every cost prediction after it.

Four numbers, each at torch's current thread count and in this process's OpenMP wait policy:

    read bandwidth   one read of a 256 MB float32 tensor (labkit.fast.roofline.read_bandwidth)
    matmul peaks     a [1024, 1024] @ [1024, 1024] product in each data type a step computes in:
                     float32, bfloat16 (torch's own matmul) and int8 (torch._int_mm, int32 sums)
    thread wake-up   what handing one parallel kernel to the other threads costs on top of its work

A data type has its own peak because the cores' vector units do more bfloat16 or int8 products per
instruction than float32 ones: a bfloat16 kernel measured against the float32 peak can look twice as
fast as "no kernel can be". The wake-up is a fixed cost per parallel call: under
OMP_WAIT_POLICY=PASSIVE (which labkit sets, so that a shared machine is not spun on) the other threads
sleep between kernels and every call wakes them, tens of microseconds each; a spinning (ACTIVE) runtime
answers in about one.

OpenMP reads its wait policy once, when torch loads: `wait_policy` is the variable as this process
set it, and the measured wake-up says whether it took effect (about 1 us when the threads spin).

    >>> machine = measure_machine()
    >>> machine.describe()
    'read bandwidth 32.0 GB/s (...); matmul peak float32 204, bfloat16 436, int8 783 GFLOP/s (...); ...'
    >>> machine.peak("bfloat16") / 1e9
    435.6
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from labkit.fast.processes import current_policy
from labkit.fast.roofline import read_bandwidth
from labkit.timing import best_seconds, median_seconds

PEAK_SIZE = 1024  # each peak's matmul: [1024, 1024] @ [1024, 1024]
PEAK_DTYPES = ("float32", "bfloat16", "int8")  # the data types the course's steps compute in
WAKE_ELEMENTS = 65_536  # an add just above torch's grain size (32768): split across the threads, little work
WAKE_CALLS = 200  # calls per timed round of the wake-up probe (one call is a few microseconds)


@dataclass(frozen=True)
class Machine:
    """What this machine can do: read bandwidth (bytes/s), a matmul peak per data type (FLOP/s; int8:
    multiply-adds x 2 per second), the seconds one parallel call spends waking the other threads, and
    the thread count and wait policy all were measured with."""

    read_bandwidth: float
    peaks: dict[str, float]  # {"float32": FLOP/s, "bfloat16": ..., "int8": ...}
    threads: int
    wake_seconds: float = 0.0
    wait_policy: str = "PASSIVE"

    def peak(self, dtype: str) -> float:
        """The matmul peak of `dtype` ("float32", "bfloat16" or "int8"), FLOP/s."""
        if dtype not in self.peaks:
            raise ValueError(f"No matmul peak measured for {dtype!r}; measured: {', '.join(self.peaks)}.")
        return self.peaks[dtype]

    @property
    def matmul_peak(self) -> float:
        """The float32 peak (FLOP/s): the roofline of notebook 07 is drawn for float32."""
        return self.peak("float32")

    def describe(self) -> str:
        peaks = ", ".join(f"{dtype} {flops / 1e9:.0f}" for dtype, flops in self.peaks.items())
        return (
            f"read bandwidth {self.read_bandwidth / 1e9:.1f} GB/s (sum of 256 MB, best of 5); matmul peak "
            f"{peaks} GFLOP/s ({PEAK_SIZE}^3, best of 5); waking the other threads {self.wake_seconds * 1e6:.1f}"
            f" us per parallel call (OMP_WAIT_POLICY={self.wait_policy}); {self.threads} threads"
        )


def matmul_peak(dtype: str, repeats: int = 5) -> float:
    """FLOP/s of the fastest of `repeats` [1024, 1024] @ [1024, 1024] products in `dtype`.

    >>> matmul_peak("bfloat16") / 1e9
    435.6
    """
    if dtype not in PEAK_DTYPES:
        raise ValueError(f"dtype must be one of {PEAK_DTYPES}, got {dtype!r}.")
    if dtype == "int8":
        a = torch.randint(-128, 128, (PEAK_SIZE, PEAK_SIZE), dtype=torch.int8)
        product = lambda: torch._int_mm(a, a)  # noqa: E731  int8 x int8 -> int32, oneDNN's int8 GEMM
    else:
        a = torch.randn(PEAK_SIZE, PEAK_SIZE, dtype=getattr(torch, dtype))
        product = lambda: a @ a  # noqa: E731
    return 2 * PEAK_SIZE**3 / best_seconds(product, repeats)


def median_call_seconds(elements: int, threads: int, rounds: int = 7) -> float:
    """Median over `rounds` of the mean seconds of one torch.add of `elements` floats at `threads` threads."""
    a, b, out = torch.randn(elements), torch.randn(elements), torch.empty(elements)

    def calls() -> None:
        for _ in range(WAKE_CALLS):
            torch.add(a, b, out=out)

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:  # median_seconds' warm-up call wakes the pool once
        return median_seconds(calls, repeats=rounds) / WAKE_CALLS
    finally:
        torch.set_num_threads(before)


def thread_wake_seconds(threads: int | None = None) -> float:
    """Seconds one parallel call spends handing its work to `threads` threads (default: torch's count),
    beyond the work itself: an add of 65,536 floats at `threads` threads, less its dispatch (a tiny add)
    and its share of the work (the same add on one thread, less dispatch, / threads). 0 on one thread.

        >>> thread_wake_seconds() * 1e6      # PASSIVE: the other thread sleeps between calls
        45.5
    """
    threads = threads or torch.get_num_threads()
    if threads == 1:
        return 0.0
    dispatch = median_call_seconds(8, 1)
    work = median_call_seconds(WAKE_ELEMENTS, 1) - dispatch
    return max(median_call_seconds(WAKE_ELEMENTS, threads) - dispatch - work / threads, 0.0)


def measure_machine() -> Machine:
    """Read bandwidth, a matmul peak per data type and the thread wake-up, at torch's current thread
    count, in this process (about 3 s).

        >>> print(measure_machine().describe())
        read bandwidth 32.0 GB/s (sum of 256 MB, best of 5); matmul peak float32 204, bfloat16 436, ...
    """
    peaks = {dtype: matmul_peak(dtype) for dtype in PEAK_DTYPES}
    return Machine(read_bandwidth(), peaks, torch.get_num_threads(), thread_wake_seconds(), current_policy())
