"""Notebook 11's old path to the load tests: the code lives in labkit.loadtest.load and
labkit.loadtest.load_result.

Kept only because notebook 11's imports cell (cell 6, id 8f1a721b) reads
`from labkit.serving.http.load import Target, open_loop, sweep, sweep_table, ttft_breakdown`.
Nothing in labkit or tests imports from here; delete this module once that cell imports from labkit.loadtest.

    >>> from labkit.serving.http.load import sweep
    >>> sweep is labkit.loadtest.load.sweep
    True
"""

from labkit.loadtest.load import open_loop, sweep
from labkit.loadtest.load_result import Target, sweep_table, ttft_breakdown

__all__ = ["Target", "open_loop", "sweep", "sweep_table", "ttft_breakdown"]
