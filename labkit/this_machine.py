"""Which machine a run is on, and how busy it was: the line a notebook prints under its set-up, so that
every timing below it, and every sentence of prose that quotes the saved run, names its machine.

    >>> print(run_line())
    this run: AMD EPYC 7B13, 2 cores, torch 2 threads · vector units: AVX2 (no AVX-512) · other work 1% of the cores: idle
    >>> machine_name()
    'AMD EPYC 7B13, 2 cores, torch 2 threads'

The load is the share of all cores that other processes kept busy during one second before the notebook's
own measurements (this process sleeps through it, so a notebook that just finished does not count): under
20 % the machine counts as idle, else as busy (timings read slower and spread more). A student's run
prints its own machine.
"""

from __future__ import annotations

import os
import platform
import time

import torch

from labkit.core.arguments import check_seconds

__all__ = ["instruction_set", "machine_name", "others_busy_share", "run_line"]

IDLE_SHARE = 0.2  # the share of the cores other work may keep busy while a run still counts as idle
CPU_INFO = "/proc/cpuinfo"
PROC_STAT = "/proc/stat"


def _cpu_info_values(key: str) -> list[str]:
    """The values of one key of /proc/cpuinfo (empty where the file does not exist, as on macOS)."""
    if not os.path.exists(CPU_INFO):
        return []
    with open(CPU_INFO) as info:
        return [line.split(":", 1)[1].strip() for line in info if line.split(":", 1)[0].strip() == key]


def machine_name() -> str:
    """CPU model, logical cores and torch threads (and the GPU, if any).

    >>> machine_name()
    'AMD EPYC 7B13, 2 cores, torch 2 threads'
    """
    names = _cpu_info_values("model name")
    cpu = names[0] if names else (platform.processor() or platform.machine())
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.get_num_threads()} threads{gpu}"


def instruction_set() -> str:
    """The widest x86 vector extension the CPU has, which sets its kernels' speed (torch's, llama.cpp's).

    >>> instruction_set()
    'AVX2 (no AVX-512)'
    """
    flags = set(" ".join(_cpu_info_values("flags")).split())
    if not flags:
        return platform.machine()  # not x86 Linux: name the architecture only
    if "avx512f" in flags:
        return "AVX-512" + (" with VNNI" if "avx512_vnni" in flags else "")
    return "AVX2 (no AVX-512)" if "avx2" in flags else "no AVX2"


def _cpu_jiffies() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all cores since boot, from /proc/stat (None where it does not exist)."""
    if not os.path.exists(PROC_STAT):
        return None
    with open(PROC_STAT) as stat:
        ticks = [int(value) for value in stat.readline().split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle and waiting on I/O
    return sum(ticks) - idle, sum(ticks)


def others_busy_share(window_seconds: float = 1.0) -> float | None:
    """The share of all cores that other processes kept busy over the next `window_seconds` (this process
    sleeps through it), from /proc/stat; elsewhere the one-minute load average per core; None if neither.

    >>> others_busy_share()      # an idle machine
    0.01
    """
    check_seconds("window_seconds", window_seconds)
    before = _cpu_jiffies()
    if before is None:
        try:
            return os.getloadavg()[0] / (os.cpu_count() or 1)
        except (AttributeError, OSError):
            return None
    own = time.process_time()
    time.sleep(window_seconds)
    after, own = _cpu_jiffies(), time.process_time() - own
    busy, total = after[0] - before[0], after[1] - before[1]
    ticks_per_second = os.sysconf("SC_CLK_TCK")
    return max(0.0, (busy - own * ticks_per_second) / total) if total else 0.0


def run_line() -> str:
    """One line naming this run's machine, its vector units, and whether other work shared its cores.

    >>> print(run_line())
    this run: AMD EPYC 7B13, 2 cores, torch 2 threads · vector units: AVX2 (no AVX-512) · other work 1% of the cores: idle
    """
    share = others_busy_share()
    if share is None:
        return f"this run: {machine_name()} · vector units: {instruction_set()} · load not reported"
    state = "idle" if share < IDLE_SHARE else "busy (other work shares the cores: timings read slower)"
    return f"this run: {machine_name()} · vector units: {instruction_set()} · other work {share:.0%} of the cores: {state}"
