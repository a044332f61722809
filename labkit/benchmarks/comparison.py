"""The one JSON record every benchmark topic prints per comparison: labkit's figure against a peer's, measured
in the same run on the machine it names.

Each topic of `python -m labkit.bench` returns a list of these from its `run()`, and the command line prints
one per line: {"bench", "metric", "labkit", "peer", "peer_name", "ratio", "machine"}.

    >>> comparison("decode", "seconds_per_token", 0.0123456789, 0.0100000001, "transformers")
    {'bench': 'decode', 'metric': 'seconds_per_token', 'labkit': 0.0123457, 'peer': 0.01, 'peer_name':
     'transformers', 'ratio': 1.235, 'machine': '...'}
"""

from __future__ import annotations

from labkit.this_machine import machine_name


def _significant(value: float, digits: int = 6) -> float:
    """value rounded to `digits` significant digits: _significant(0.0123456789) == 0.0123457."""
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
