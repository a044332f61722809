"""Benchmarks as ratios against peers measured in the same run, on the machine named in each line.

    python -m labkit.bench --list
    python -m labkit.bench decode [--repeats 3] [--quick]

Each topic (a module in labkit/benchmarks/) prints a readable table, then one JSON line per
comparison: {"bench", "metric", "labkit", "peer", "peer_name", "ratio", "machine"}
(labkit.benchmarks.comparison).

The timing every benchmark shares is labkit.timing's.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys

# topic -> its module, named in full: tests/project/test_structure.py reads these as imports of labkit.bench
TOPICS = {
    "decode": "labkit.benchmarks.decode",
    "kvcache": "labkit.benchmarks.kvcache",
    "quant": "labkit.benchmarks.quant",
    "speculative": "labkit.benchmarks.speculative",
    "batching": "labkit.benchmarks.batching",
    "sampling": "labkit.benchmarks.sampling",
    "serve": "labkit.benchmarks.serve",
    "spec": "labkit.benchmarks.spec_serve",
    "engines": "labkit.benchmarks.engines",
    "fast": "labkit.benchmarks.fast",
    "simd": "labkit.benchmarks.simd",
    "longctx": "labkit.benchmarks.longctx_bench",
}


def available_topics() -> list[str]:
    """The topics whose module exists (later labs add theirs)."""
    return [topic for topic, module in TOPICS.items() if importlib.util.find_spec(module) is not None]


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
            print(f"{name:<12}{importlib.import_module(TOPICS[name]).__doc__.splitlines()[0]}")
        return 0
    if args.topic not in topics:
        parser.error(f"unknown topic {args.topic!r}; choose one of: {', '.join(topics)} (or --list)")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    results = importlib.import_module(TOPICS[args.topic]).run(repeats=args.repeats, quick=args.quick)
    for result in results:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
