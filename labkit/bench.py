"""Benchmarks as ratios against peers measured in the same run, on the machine named in each line.

    python -m labkit.bench --list
    python -m labkit.bench decode [--repeats 3] [--quick]

Each topic (a module in labkit/benchmarks/) prints a readable table, then one JSON line per
comparison: {"bench", "metric", "labkit", "peer", "peer_name", "ratio", "machine"}.

The timing helpers every benchmark and notebook shares live here too: runs timed in turns
(`interleaved_seconds`, `interleaved_tokens_per_second`) and a median with its range (`Spread`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

TOPICS = ["decode", "kvcache", "quant", "speculative", "batching", "serve", "engines", "fast"]  # modules of labkit/benchmarks/


def available_topics() -> list[str]:
    """The topics whose module exists (later labs add theirs)."""
    return [t for t in TOPICS if importlib.util.find_spec(f"labkit.benchmarks.{t}") is not None]


def machine_name() -> str:
    """CPU model, logical cores and torch threads (and the GPU, if any)."""
    cpu = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as info:
            names = [line.split(":", 1)[1].strip() for line in info if line.startswith("model name")]
        cpu = names[0] if names else cpu
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.get_num_threads()} threads{gpu}"


def median_tokens_per_second(run: Callable[[], int], repeats: int) -> float:
    """Median over `repeats` timed runs of run() -> tokens produced (after one untimed warm-up)."""
    run()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = run()
        rates.append(tokens / (time.perf_counter() - start))
    return statistics.median(rates)


@dataclass(frozen=True)
class Spread:
    """The median of a few timed repeats and their range."""

    median: float
    low: float  # the smallest repeat
    high: float  # the largest repeat

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        """Median, min and max of at least one value.

            >>> Spread.of([3.0, 1.0, 2.0])
            Spread(median=2.0, low=1.0, high=3.0)
        """
        if not values:
            raise ValueError("Spread.of needs at least one value.")
        return cls(statistics.median(values), min(values), max(values))

    def format(self, digits: int = 2, unit: str = "") -> str:
        """'2.61x [2.40-2.75]': the median, then the range of the repeats."""
        return f"{self.median:.{digits}f}{unit} [{self.low:.{digits}f}-{self.high:.{digits}f}]"


def interleaved_seconds(runs: Sequence[Callable[[], object]], repeats: int, warmup: bool = False,
                        progress: Callable[[Iterable], Iterable] | None = None) -> list[list[float]]:
    """Seconds of each run(), timed in turns: `repeats` rounds, each timing every run once, in order.

    A change of the machine's load mid-way hits every run alike, where timing one run after another would
    blame it on whichever ran then. warmup: one untimed round first (the compile of a compiled path); leave
    it out when the runs are already warm and time is short. progress(iterable) wraps the rounds, warm-up
    included (e.g. tqdm). Returns one list of `repeats` seconds per run.

        >>> interleaved_seconds([lambda: sum(range(1000)), lambda: sum(range(10))], repeats=3)
        [[2.1e-05, 1.9e-05, 2.0e-05], [1.1e-06, 9.0e-07, 9.5e-07]]
    """
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}.")
    seconds: list[list[float]] = [[] for _ in runs]
    for round_ in (progress or iter)(range(repeats + bool(warmup))):
        for index, run in enumerate(runs):
            start = time.perf_counter()
            run()
            if round_ or not warmup:
                seconds[index].append(time.perf_counter() - start)
    return seconds


def interleaved_tokens_per_second(runs: list[Callable[[], int]], repeats: int,
                                  progress: Callable | None = None) -> list[float]:
    """Median tokens/s of each run() -> tokens produced, timed in turns by interleaved_seconds: one
    untimed warm-up round, then `repeats` rounds in which every run is timed once.
    progress(iterable) wraps the rounds (e.g. tqdm); the default shows nothing.

        >>> interleaved_tokens_per_second([fp32_run, int4_run], repeats=3)
        [12.8, 27.2]
    """
    tokens: list[list[int]] = [[] for _ in runs]

    def counted(index: int) -> Callable[[], None]:
        return lambda: tokens[index].append(runs[index]())

    seconds = interleaved_seconds([counted(i) for i in range(len(runs))], repeats, warmup=True, progress=progress)
    return [statistics.median(n / t for n, t in zip(counts[1:], times)) for counts, times in zip(tokens, seconds)]


def _significant(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")


def comparison(bench: str, metric: str, labkit_value: float, peer_value: float, peer_name: str) -> dict:
    """One JSON record: labkit's figure against a peer's, measured in the same run.

    Figures keep 6 significant digits (seconds per token are small numbers: 3 decimals would lose the
    ratio between them); the ratio keeps 3 decimals.
    """
    return {"bench": bench, "metric": metric, "labkit": _significant(labkit_value), "peer": _significant(peer_value),
            "peer_name": peer_name, "ratio": round(labkit_value / peer_value, 3), "machine": machine_name()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.bench", description=__doc__.splitlines()[0])
    parser.add_argument("topic", nargs="?", help=f"one of: {', '.join(available_topics())}")
    parser.add_argument("--list", action="store_true", help="list the topics and exit")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per implementation (median)")
    parser.add_argument("--quick", action="store_true", help="small sizes: checks the benchmark runs, not speed")
    args = parser.parse_args(argv)
    topics = available_topics()
    if args.list:
        for name in topics:
            print(f"{name:<12}{importlib.import_module(f'labkit.benchmarks.{name}').__doc__.splitlines()[0]}")
        return 0
    if args.topic not in topics:
        parser.error(f"unknown topic {args.topic!r}; choose one of: {', '.join(topics)} (or --list)")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    results = importlib.import_module(f"labkit.benchmarks.{args.topic}").run(repeats=args.repeats, quick=args.quick)
    for result in results:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
