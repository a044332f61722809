"""Notebook 11's old path to the load tester's client: the code lives in labkit.loadtest.client and
labkit.loadtest.metrics_page.

Kept only because notebook 11's imports cell (cell 6, id 8f1a721b) reads
`from labkit.serving.http.client import engine_summaries, mean_between, metric_value, stream_ollama,
stream_openai`. Nothing in labkit or tests imports from here; delete this module once that cell imports from
labkit.loadtest.

    >>> from labkit.serving.http.client import stream_openai
    >>> stream_openai is labkit.loadtest.client.stream_openai
    True
"""

from labkit.loadtest.client import stream_ollama, stream_openai
from labkit.loadtest.metrics_page import engine_summaries, mean_between, metric_value

__all__ = ["engine_summaries", "mean_between", "metric_value", "stream_ollama", "stream_openai"]
