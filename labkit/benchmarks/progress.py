"""The line a benchmark prints while it runs, so a long run shows where it is: `[topic] message` on stderr
(stdout keeps only the table and the JSON records).

    >>> progress("kvcache", "128 new tokens with the cache, 3 runs")
    [kvcache] 128 new tokens with the cache, 3 runs
"""

from __future__ import annotations

import sys


def progress(topic: str, message: str) -> None:
    """Print `[topic] message` to stderr at once (flushed, so it shows before the step it announces ends)."""
    print(f"[{topic}] {message}", file=sys.stderr, flush=True)
