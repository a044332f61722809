"""Which machine a run is on, and how busy it was: the line a notebook prints under its set-up, so that
every timing below it, and every sentence of prose that quotes the saved run, names its machine.

    >>> print(run_line())
    this run: AMD EPYC 7B13, 2 cores, torch 2 threads · vector units: AVX2 (no AVX-512) · load 0.08 per core: idle
    >>> machine_name()
    'AMD EPYC 7B13, 2 cores, torch 2 threads'

The load is the operating system's one-minute load average over the logical cores, read before the
notebook's own measurements: under 0.5 per core the machine counts as idle, else as busy (other work
shared the cores, and timings read slower and spread more). A student's run prints its own machine.
"""

from __future__ import annotations

import os
import platform

import torch

__all__ = ["instruction_set", "load_per_core", "machine_name", "run_line"]

IDLE_LOAD_PER_CORE = 0.5  # one-minute load average per logical core below which a run counts as idle
CPU_INFO = "/proc/cpuinfo"


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


def load_per_core() -> float | None:
    """The one-minute load average per logical core (None where the system does not report it).

    >>> load_per_core()
    0.08
    """
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return None


def run_line() -> str:
    """One line naming this run's machine, its vector units, and whether it was idle.

    >>> print(run_line())
    this run: AMD EPYC 7B13, 2 cores, torch 2 threads · vector units: AVX2 (no AVX-512) · load 0.08 per core: idle
    """
    load = load_per_core()
    busy = (
        "load not reported"
        if load is None
        else (
            f"load {load:.2f} per core: {'idle' if load < IDLE_LOAD_PER_CORE else 'busy (timings read slower)'}"
        )
    )
    return f"this run: {machine_name()} · vector units: {instruction_set()} · {busy}"
