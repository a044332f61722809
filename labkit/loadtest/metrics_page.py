"""The server's own figures, read from its Prometheus /metrics page (notebook 11).

A load test reads the page before and after a level: `engine_summaries` gives every histogram's (sum, count),
`mean_between` the mean of what was observed between two reads (the server's own TTFT, TPOT and queue time
over that level), `metric_value` one counter or gauge sample by name and labels.

    >>> before = engine_summaries(httpx.get(server.url + "/metrics").text)
    >>> ...  # the level's requests
    >>> after = engine_summaries(httpx.get(server.url + "/metrics").text)
    >>> mean_between(before, after, "labkit_time_to_first_token_seconds")
    0.163
"""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from labkit.core.arguments import check_text
from labkit.core.doors import check_table


def check_metrics_text(metrics_text: object) -> str:
    """metrics_text, if it is text (a /metrics page); else a TypeError naming it."""
    if not isinstance(metrics_text, str):
        raise TypeError(
            f"metrics_text must be a Prometheus text page (httpx.get(url + '/metrics').text), "
            f"got {type(metrics_text).__name__}."
        )
    return metrics_text


def engine_summaries(metrics_text: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of every histogram in a Prometheus text page, e.g. the server's TTFT and TPOT.

    >>> engine_summaries(httpx.get(server.url + "/metrics").text)["labkit_time_to_first_token_seconds"]
    (3.91, 24.0)
    """
    check_metrics_text(metrics_text)
    found = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.type != "histogram":
            continue
        samples = {sample.name: sample.value for sample in family.samples}
        found[family.name] = (
            samples.get(family.name + "_sum", 0.0),
            samples.get(family.name + "_count", 0.0),
        )
    return found


def metric_value(metrics_text: str, name: str, **labels: str) -> float:
    """The value of one sample (0.0 if absent), e.g. metric_value(text, "labkit_requests_rejected_total").

    >>> metric_value(text, "labkit_requests_finished_total", reason="abort")
    1.0
    """
    check_metrics_text(metrics_text)
    check_text("name", name, example="'labkit_requests_rejected_total'")
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def mean_between(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]], name: str
) -> float:
    """The mean of a histogram over what was observed between two `engine_summaries` (nan if nothing)."""
    check_table("before", before, "(sum, count) pairs, as engine_summaries returns them", of=tuple)
    check_table("after", after, "(sum, count) pairs, as engine_summaries returns them", of=tuple)
    check_text("name", name, example="'labkit_time_to_first_token_seconds'")
    total = after.get(name, (0.0, 0.0))[0] - before.get(name, (0.0, 0.0))[0]
    count = after.get(name, (0.0, 0.0))[1] - before.get(name, (0.0, 0.0))[1]
    return total / count if count else math.nan
