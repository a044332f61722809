"""labkit.fast.allocator: with glibc's thresholds raised, freed tensors' pages are reused, not faulted in again."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from labkit.fast.allocator import allocator_settings

GLIBC = platform.libc_ver()[0] == "glibc"

# A step's pattern: twenty 1 MiB tensors, written, then all freed; the minor page faults of the second round.
ROUNDS = """
import ctypes, resource, sys, torch
from labkit.fast import allocator
if sys.argv[1] == "keep":
    applied = allocator.keep_freed_memory()
else:  # glibc's starting thresholds, fixed (by default they move with what the process freed before)
    allocator.MMAP_THRESHOLD = allocator.TRIM_THRESHOLD = 128 << 10
    applied = allocator.keep_freed_memory()
torch.empty(1 << 18).fill_(1); torch.empty(1 << 18).fill_(1)
def round_faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    tensors = [torch.empty(1 << 18).fill_(1) for _ in range(20)]  # 1 MiB each
    del tensors
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
round_faults()
print(applied, round_faults())
"""


def second_round_faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", ROUNDS, mode], capture_output=True, text=True, check=True)
    applied, faults = out.stdout.split()
    return applied, int(faults)


@pytest.mark.skipif(not GLIBC, reason="mallopt's thresholds are glibc's")
def test_freed_tensors_pages_are_reused_once_the_thresholds_are_raised():
    applied, kept = second_round_faults("keep")
    applied_small, default = second_round_faults("small")
    assert applied == applied_small == "True"
    # 20 MiB is 5,120 pages of 4 KiB: at glibc's starting thresholds every tensor is mapped afresh and its pages
    # fault in again; kept, the second round finds them in the heap
    assert default > 2_000, default
    assert kept < default / 10, (kept, default)


def test_the_settings_name_both_thresholds():  # keep_freed_memory itself runs in a subprocess above: it is process-wide
    assert "32 MiB" in allocator_settings() and "1 GiB" in allocator_settings()
