"""What this machine can do, measured once (notebook 07) and reused by every cost prediction after it.

Four numbers, each at torch's current thread count and in this process's OpenMP wait policy, each the
median of its repeats, kept with their spread (labkit.fast.regime.relative_spread: their interquartile
range over the median), which says how far a regime read from them can be trusted:

    read bandwidth   sums of a 256 MB float32 tensor, median of 5 (labkit.fast.roofline.read_bandwidth)
    matmul peaks     [1024, 1024] @ [1024, 1024] products in each data type a step computes in, median of 5:
                     float32, bfloat16 (torch's own matmul) and int8 (torch._int_mm, int32 sums)
    thread wake-up   what handing one parallel kernel to the other threads costs on top of its work
                     (its spread: the threaded call's rounds' interquartile range, over the wake-up)

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
    'read bandwidth 32.0 GB/s ±6% (...); matmul peak float32 204 ±3%, bfloat16 436 ±1%, int8 783 ±2% GFLOP/s ...'
    >>> machine.peak("bfloat16") / 1e9
    435.6
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

from labkit.fast.processes import current_policy
from labkit.fast.regime import Probed, plus_minus, relative_spread
from labkit.fast.roofline import read_bandwidth_probe
from labkit.timing import repeat_seconds

PEAK_SIZE = 1024  # each peak's matmul: [1024, 1024] @ [1024, 1024]
PEAK_DTYPES = ("float32", "bfloat16", "int8")  # the data types the course's steps compute in
PROBE_REPEATS = 5  # timed repeats of the bandwidth and each peak (after one warm-up): their median and spread
WAKE_ELEMENTS = 65_536  # an add just above torch's grain size (32768): split across the threads, little work
WAKE_CALLS = 200  # calls per timed round of the wake-up probe (one call is a few microseconds)


@dataclass(frozen=True)
class Machine:
    """What this machine can do: read bandwidth (bytes/s), a matmul peak per data type (FLOP/s; int8:
    multiply-adds x 2 per second), the seconds one parallel call spends waking the other threads, and
    the thread count and wait policy all were measured with. Beside each number, the relative spread of
    its repeats (0.0: not measured, as in a Machine built by hand)."""

    read_bandwidth: float
    peaks: dict[str, float]  # {"float32": FLOP/s, "bfloat16": ..., "int8": ...}
    threads: int
    wake_seconds: float = 0.0
    wait_policy: str = "PASSIVE"
    read_bandwidth_spread: float = 0.0  # the repeats' interquartile range over their median
    peak_spreads: dict[str, float] = field(default_factory=dict)  # {dtype: the same, of its peak's repeats}
    wake_spread: float = 0.0  # the threaded call's rounds' interquartile range, over wake_seconds

    def peak(self, dtype: str) -> float:
        """The matmul peak of `dtype` ("float32", "bfloat16" or "int8"), FLOP/s."""
        if dtype not in self.peaks:
            raise ValueError(f"No matmul peak measured for {dtype!r}; measured: {', '.join(self.peaks)}.")
        return self.peaks[dtype]

    def peak_spread(self, dtype: str) -> float:
        """The relative spread of `dtype`'s peak (0.0 when not measured)."""
        return self.peak_spreads.get(dtype, 0.0)

    @property
    def matmul_peak(self) -> float:
        """The float32 peak (FLOP/s): the roofline of notebook 07 is drawn for float32."""
        return self.peak("float32")

    def timing_spread(self, dtype: str = "float32") -> float:
        """The larger spread of the two probes a step computing in `dtype` is read against (the bandwidth
        and `dtype`'s peak): how much repeats of the same work varied on this machine while it was
        measured. A step's own timed terms (overhead, matmul kernels) are read with it, since
        measure_step keeps only their medians."""
        return max(self.read_bandwidth_spread, self.peak_spread(dtype))

    def spreads(self, dtype: str = "float32") -> dict[str, float]:
        """The relative spread behind each term and floor share of a step computing in `dtype`, as
        labkit.fast.regime.regime_of reads them: the bandwidth probe's (memory share, KV cache), `dtype`'s
        peak probe's (compute share), the wake-up probe's (wake-ups), and the timing spread for the
        matmul kernels, timed on the step itself. The overhead's is the step's own probe's
        (StepCosts.op_spread), not the machine's.

        >>> Machine(32e9, {"float32": 204e9}, 2, read_bandwidth_spread=0.08).spreads()["memory"]
        0.08
        """
        timing, bandwidth = self.timing_spread(dtype), self.read_bandwidth_spread
        return {
            "thread wake-ups": self.wake_spread,
            "matmul kernels": timing,
            "KV cache": bandwidth,
            "memory": bandwidth,
            "compute": self.peak_spread(dtype),
        }

    def describe(self) -> str:
        """One line: each number with its spread, and how it was measured.

        >>> Machine(32e9, {"float32": 204e9}, 2, read_bandwidth_spread=0.06).describe()[:36]
        'read bandwidth 32.0 GB/s ±6% (sum of'
        """
        peaks = ", ".join(
            f"{dtype} {flops / 1e9:.0f}{spread_suffix(self.peak_spread(dtype))}"
            for dtype, flops in self.peaks.items()
        )
        measured = max(self.read_bandwidth_spread, self.wake_spread, *self.peak_spreads.values()) > 0
        return (
            f"read bandwidth {self.read_bandwidth / 1e9:.1f} GB/s{spread_suffix(self.read_bandwidth_spread)} (sum of "
            f"256 MB, median of {PROBE_REPEATS}); matmul peak {peaks} GFLOP/s ({PEAK_SIZE}^3, median of "
            f"{PROBE_REPEATS}); waking the other threads {self.wake_seconds * 1e6:.1f} us"
            f"{spread_suffix(self.wake_spread)} per parallel call (OMP_WAIT_POLICY={self.wait_policy}); "
            f"{self.threads} threads"
            + ("; ±: the repeats' interquartile range over their median" if measured else "")
        )


def spread_suffix(spread: float) -> str:
    """' ±6%' for a measured spread, '' for none (0.0).

    >>> spread_suffix(0.06), spread_suffix(0.0)
    (' ±6%', '')
    """
    if isinstance(spread, bool) or not isinstance(spread, (int, float)) or not spread >= 0:
        raise ValueError(
            f"spread must be a relative spread, a number of 0 or more (0.06 prints ±6%), got {spread!r}."
        )
    return f" {plus_minus(spread)}" if spread > 0 else ""


def matmul_peak_probe(dtype: str, repeats: int = PROBE_REPEATS) -> Probed:
    """FLOP/s of [1024, 1024] @ [1024, 1024] products in `dtype`: the median of `repeats` and their spread.

    >>> matmul_peak_probe("bfloat16")
    Probed(value=435600000000.0, spread=0.021)
    """
    if dtype not in PEAK_DTYPES:
        raise ValueError(f"dtype must be one of {PEAK_DTYPES}, got {dtype!r}.")
    if dtype == "int8":
        a = torch.randint(-128, 128, (PEAK_SIZE, PEAK_SIZE), dtype=torch.int8)
        product = lambda: torch._int_mm(a, a)  # noqa: E731  int8 x int8 -> int32, oneDNN's int8 GEMM
    else:
        a = torch.randn(PEAK_SIZE, PEAK_SIZE, dtype=getattr(torch, dtype))
        product = lambda: a @ a  # noqa: E731
    return Probed.of([2 * PEAK_SIZE**3 / seconds for seconds in repeat_seconds(product, repeats)])


def matmul_peak(dtype: str, repeats: int = PROBE_REPEATS) -> float:
    """FLOP/s of `dtype`'s [1024, 1024] @ [1024, 1024] product, the median of `repeats` (matmul_peak_probe).

    >>> matmul_peak("bfloat16") / 1e9
    435.6
    """
    return matmul_peak_probe(dtype, repeats).value


def call_seconds(elements: int, threads: int, rounds: int = 7) -> list[float]:
    """The mean seconds of one torch.add of `elements` floats at `threads` threads, in each of `rounds`
    timed rounds (after an untimed one, which wakes the pool once)."""
    a, b, out = torch.randn(elements), torch.randn(elements), torch.empty(elements)

    def calls() -> None:
        for _ in range(WAKE_CALLS):
            torch.add(a, b, out=out)

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return [seconds / WAKE_CALLS for seconds in repeat_seconds(calls, repeats=rounds)]
    finally:
        torch.set_num_threads(before)


def median_call_seconds(elements: int, threads: int, rounds: int = 7) -> float:
    """Median over `rounds` of the mean seconds of one torch.add of `elements` floats at `threads` threads."""
    return statistics.median(call_seconds(elements, threads, rounds))


def thread_wake_probe(threads: int | None = None) -> Probed:
    """Seconds one parallel call spends handing its work to `threads` threads (default: torch's count),
    beyond the work itself: an add of 65,536 floats at `threads` threads, less its dispatch (a tiny add)
    and its share of the work (the same add on one thread, less dispatch, / threads). Its spread: the
    threaded add's rounds' interquartile range, over the wake-up (0 on one thread, or no wake-up).

        >>> thread_wake_probe()      # PASSIVE: the other thread sleeps between calls
        Probed(value=4.55e-05, spread=0.12)
    """
    threads = threads or torch.get_num_threads()
    if threads == 1:
        return Probed(0.0, 0.0)
    dispatch = median_call_seconds(8, 1)
    work = median_call_seconds(WAKE_ELEMENTS, 1) - dispatch
    rounds = call_seconds(WAKE_ELEMENTS, threads)
    threaded = statistics.median(rounds)
    wake = max(threaded - dispatch - work / threads, 0.0)
    middle = relative_spread(rounds) * threaded  # the rounds' interquartile range, in seconds
    return Probed(wake, middle / wake if wake > 0 else 0.0)


def thread_wake_seconds(threads: int | None = None) -> float:
    """The seconds of thread_wake_probe: what one parallel call spends waking `threads` threads.

    >>> thread_wake_seconds() * 1e6      # PASSIVE: the other thread sleeps between calls
    45.5
    """
    return thread_wake_probe(threads).value


def measure_machine() -> Machine:
    """Read bandwidth, a matmul peak per data type and the thread wake-up, each the median of its repeats
    with their spread, at torch's current thread count, in this process (seconds: a few where bfloat16
    and int8 have fast kernels, about 25 on an AVX2-only CPU, whose bfloat16 and int8 products are slow).

        >>> print(measure_machine().describe())
        read bandwidth 32.0 GB/s ±6% (sum of 256 MB, median of 5); matmul peak float32 204 ±3%, ...
    """
    peaks = {dtype: matmul_peak_probe(dtype) for dtype in PEAK_DTYPES}
    bandwidth, wake = read_bandwidth_probe(), thread_wake_probe()
    return Machine(
        bandwidth.value,
        {dtype: probe.value for dtype, probe in peaks.items()},
        torch.get_num_threads(),
        wake.value,
        current_policy(),
        read_bandwidth_spread=bandwidth.spread,
        peak_spreads={dtype: probe.spread for dtype, probe in peaks.items()},
        wake_spread=wake.spread,
    )
