"""Benchmarks as ratios against peers measured in the same run, on the machine named in each line.

    python -m labkit.bench --list
    python -m labkit.bench decode [--repeats 3] [--quick]

Each topic (a module in labkit/benchmarks/) prints a readable table, then one JSON line per
comparison: {"bench", "metric", "labkit", "peer", "peer_name", "ratio", "machine"}.

The timing every benchmark shares is labkit.timing's.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys

from labkit.this_machine import machine_name

# modules of labkit/benchmarks/
TOPICS = [
    "decode",
    "kvcache",
    "quant",
    "speculative",
    "batching",
    "sampling",
    "serve",
    "engines",
    "fast",
    "simd",
]


def available_topics() -> list[str]:
    """The topics whose module exists (later labs add theirs)."""
    return [t for t in TOPICS if importlib.util.find_spec(f"labkit.benchmarks.{t}") is not None]


def _significant(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")


def comparison(bench: str, metric: str, labkit_value: float, peer_value: float, peer_name: str) -> dict:
    """One JSON record: labkit's figure against a peer's, measured in the same run.

    Figures keep 6 significant digits (seconds per token are small numbers: 3 decimals would lose the
    ratio between them); the ratio keeps 3 decimals.
    """
    return {
        "bench": bench,
        "metric": metric,
        "labkit": _significant(labkit_value),
        "peer": _significant(peer_value),
        "peer_name": peer_name,
        "ratio": round(labkit_value / peer_value, 3),
        "machine": machine_name(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.bench", description=__doc__.splitlines()[0])
    parser.add_argument("topic", nargs="?", help=f"one of: {', '.join(available_topics())}")
    parser.add_argument("--list", action="store_true", help="list the topics and exit")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per implementation (median)")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes: checks the benchmark runs, not speed"
    )
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
    results = importlib.import_module(f"labkit.benchmarks.{args.topic}").run(
        repeats=args.repeats, quick=args.quick
    )
    for result in results:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
