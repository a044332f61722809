"""Where a model runs: a CPU's RAM, Apple silicon's unified memory or a GPU's VRAM, and how much of it is
left for weights + KV cache once the operating system and the runtime have taken their share.

    usable = devices x (memory per device - reserve per device)

The reserve is a rule of thumb per kind of memory (RESERVES says which and why); measure your own
(notebook 12 reads what the system of this machine already uses):

    RAM      3 GB fixed: the OS, a desktop, a browser and the Python runtime on a laptop
             (a headless Linux server needs about 1 GB).
    unified  25 %: macOS lets the GPU use about 75 % of unified memory by default (Metal's
             recommendedMaxWorkingSetSize; `sysctl iogpu.wired_limit_mb` raises it).
    VRAM     10 % + 1 GB per GPU: vLLM's default gpu_memory_utilization=0.9 leaves 10 % to other
             processes, and the CUDA context (0.5-1 GB) and the framework's workspace come out of the rest.

Several GPUs (devices > 1) hold one model by tensor parallelism: each keeps 1/N of every layer's
weights and KV heads, so the query and KV heads must divide by N (see `Hardware.splits`).

    >>> HARDWARE["RTX 4090 24 GB"].usable_bytes / 1e9
    20.6
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.core.arguments import check_int
from labkit.table import Column, format_table

# kind -> (fraction of each device's memory, fixed bytes per device, the rule in words, why):
# reserve = fraction x memory + fixed
RESERVES: dict[str, tuple[float, float, str, str]] = {
    "RAM": (0.0, 3e9, "3 GB", "the OS, a desktop, a browser and the runtime"),
    "unified": (0.25, 0.0, "25 %", "macOS gives the GPU about 75 % of unified memory by default"),
    "VRAM": (
        0.10,
        1e9,
        "10 % + 1 GB per GPU",
        "vLLM's gpu_memory_utilization=0.9; CUDA context and workspace",
    ),
    "budget": (0.0, 0.0, "nothing", "a plain budget of bytes"),
}


def reserve_bytes(memory_bytes: float, kind: str) -> float:
    """Bytes the OS and the runtime keep out of one device of `kind` ("RAM", "unified", "VRAM", "budget").

    >>> reserve_bytes(80e9, "VRAM") / 1e9  # 10 % + 1 GB
    9.0
    """
    if kind not in RESERVES:
        raise ValueError(f"kind must be one of {', '.join(RESERVES)}, got {kind!r}.")
    fraction, fixed, _, _ = RESERVES[kind]
    return fraction * memory_bytes + fixed


@dataclass(frozen=True)
class Hardware:
    """One machine (or N identical GPUs) that a model may run on."""

    name: str
    memory_bytes: float  # per device
    kind: str  # "RAM" (a CPU's), "unified" (Apple silicon: CPU and GPU share it), "VRAM" (a GPU's own), "budget"
    bandwidth_bytes_per_s: float = 0.0  # per device, the published peak (0: unknown); it bounds decode speed
    devices: int = 1  # GPUs that hold one model between them, by tensor parallelism

    def __post_init__(self):
        reserve_bytes(1.0, self.kind)  # checks the kind
        check_int("devices", self.devices, minimum=1)
        for field in ("memory_bytes", "bandwidth_bytes_per_s"):
            value = getattr(self, field)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(f"{field} must be a number of bytes >= 0, got {value!r}.")

    @property
    def reserve_bytes(self) -> float:
        """What the OS and runtime keep, per device."""
        return reserve_bytes(self.memory_bytes, self.kind)

    @property
    def usable_bytes(self) -> float:
        """What is left for weights + KV cache, over all devices (0 if the reserve takes it all)."""
        return self.devices * max(self.memory_bytes - self.reserve_bytes, 0.0)

    @property
    def bandwidth(self) -> float:
        """Bytes/s of all devices together: under tensor parallelism each reads its own 1/N at once."""
        return self.devices * self.bandwidth_bytes_per_s

    def splits(self, n_heads: int, n_kv_heads: int) -> bool:
        """Whether tensor parallelism over `devices` can split these heads evenly (always, for one device)."""
        return n_heads % self.devices == 0 and n_kv_heads % self.devices == 0


def _gpus(count: int) -> Hardware:
    return Hardware(f"{count} x H100 80 GB", 80e9, "VRAM", 3.35e12, devices=count)


# Published peak bandwidths: dual-channel DDR4-3200 51.2 GB/s and DDR5-5600 89.6 GB/s; M2 Max 400 GB/s;
# RTX 4090 1,008 GB/s; H100 SXM 3.35 TB/s (an A100 80 GB has the same memory and 2.0 TB/s); H200 4.8 TB/s.
HARDWARE: dict[str, Hardware] = {
    h.name: h
    for h in [
        Hardware("laptop 8 GB", 8e9, "RAM", 51.2e9),
        Hardware("laptop 16 GB", 16e9, "RAM", 51.2e9),
        Hardware("laptop 32 GB", 32e9, "RAM", 89.6e9),
        Hardware("Mac 64 GB", 64e9, "unified", 400e9),
        Hardware("RTX 4090 24 GB", 24e9, "VRAM", 1.008e12),
        Hardware("H100 80 GB", 80e9, "VRAM", 3.35e12),
        Hardware("H200 141 GB", 141e9, "VRAM", 4.8e12),
        _gpus(2),
        _gpus(4),
        _gpus(8),
    ]
}


def each(hardware: Hardware) -> str:
    """ "" for one device, "4 x " for four: what a per-device amount is prefixed with."""
    return "" if hardware.devices == 1 else f"{hardware.devices} x "


def hardware_table(hardware: dict[str, Hardware] | None = None) -> str:
    """Memory, reserve, usable memory and bandwidth of each machine, RAM and VRAM apart, as a text table."""
    hardware = HARDWARE if hardware is None else hardware
    columns = [
        Column("hardware", max(len("hardware"), *(len(name) for name in hardware)), align="<"),
        Column("kind", 7, align="<"),
        Column("memory", 9),
        Column("reserve", 9),
        Column("usable", 9),
        Column("bandwidth", 11),
    ]
    rows = [
        [
            name,
            h.kind,
            f"{each(h)}{h.memory_bytes / 1e9:.0f} GB",
            f"{each(h)}{h.reserve_bytes / 1e9:.1f} GB",
            f"{h.usable_bytes / 1e9:.1f} GB",
            f"{h.bandwidth / 1e9:,.0f} GB/s",
        ]
        for name, h in hardware.items()
    ]
    lines = [format_table(columns, rows, gap="  ")]
    kinds = dict.fromkeys(h.kind for h in hardware.values())
    lines += [f"reserve for {kind}: {RESERVES[kind][2]} ({RESERVES[kind][3]})" for kind in kinds]
    return "\n".join(lines)
