"""Checkers of notebook 11 pass the worked solutions, give a hint for wrong answers, and never raise."""

import json
import math
from types import SimpleNamespace

import pytest

from labkit import checks
from labkit.checks.serving import STREAMING_CHANGES, littles_law_verdict


def client_metrics(sent_s, arrivals_s):  # the worked solution
    ttft = arrivals_s[0] - sent_s
    n = len(arrivals_s)
    tpot = (arrivals_s[-1] - arrivals_s[0]) / (n - 1) if n > 1 else math.nan
    return ttft, tpot


def parse_events(raw):  # the worked solution
    events = []
    for line in raw.splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        events.append(json.loads(payload))
    return events


def test_client_metrics(capsys):
    assert checks.check_client_metrics(client_metrics)
    assert "Correct" in capsys.readouterr().out
    wrongs = [
        (lambda s, a: (a[0], client_metrics(s, a)[1]), "subtract `sent`"),
        (lambda s, a: (a[0] - s, (a[-1] - a[0]) / len(a)), "divide by n - 1"),
        (lambda s, a: (a[0] - s, (a[-1] - s) / len(a)), "leaves out the first token's wait"),
        (lambda s, a: (a[0] - s, (a[-1] - a[0]) / (len(a) - 1)), "ZeroDivisionError"),  # one token
        (lambda s, a: (a[-1] - s, 0.1), "first token's arrival minus the send time"),
    ]
    for fn, hint in wrongs:
        assert not checks.check_client_metrics(fn)
        assert hint in capsys.readouterr().out
    assert not checks.check_client_metrics(None)
    assert "Not attempted yet" in capsys.readouterr().out


def test_sse_parser(capsys):
    assert checks.check_sse_parser(parse_events)
    assert "Correct" in capsys.readouterr().out
    wrongs = [
        (lambda raw: [line[6:] for line in raw.splitlines() if line.startswith("data: {")], "not strings"),
        (
            lambda raw: [json.loads(line[5:]) for line in raw.splitlines() if line.startswith("data:")],
            "raised",
        ),
        (lambda raw: [json.loads(line[6:]) for line in raw.splitlines() if line], "skip the other lines"),
        (
            lambda raw: [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")],
            "'data:' without the space",
        ),
    ]
    for fn, hint in wrongs:
        assert not checks.check_sse_parser(fn)
        assert hint in capsys.readouterr().out
    assert not checks.check_sse_parser(None)
    assert "Not attempted yet" in capsys.readouterr().out


def test_littles_law(capsys):
    assert littles_law_verdict(16 / 2.5, in_flight=16, latency_s=2.5)
    assert "16 / 2.5 s" in capsys.readouterr().out
    for wrong, hint in [
        (40, "requests x seconds"),
        (2.5 / 16, "upside down"),
        (0.4, "one client's rate"),
        (3, "is not it"),
        ("six", "give a number"),
    ]:
        assert not littles_law_verdict(wrong, in_flight=16, latency_s=2.5)
        assert hint in capsys.readouterr().out
    assert not littles_law_verdict(None, 16, 2.5)
    assert "Not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("streamed_e2e, sooner", [(1.85, "first token"), (1.0, "both")])
def test_streaming_gain_is_the_whole_answers_time_over_the_streamed_ttft(
    capsys, as_measured, streamed_e2e, sooner
):
    # seconds, as notebook 11 measures them
    whole, streamed = 1.8, SimpleNamespace(ttft_s=0.12, e2e_s=streamed_e2e)
    as_measured(whole, streamed)
    assert checks.check_streaming_gain(15.0, sooner, whole, streamed)
    out = capsys.readouterr().out
    assert not any(name in out or meaning in out for name, meaning in STREAMING_CHANGES.items()), out
    for other in set(STREAMING_CHANGES) - {sooner}:
        assert not checks.check_streaming_gain(15.0, other, whole, streamed)
        assert "does not fit your measurement" in capsys.readouterr().out
    for wrong, hint in [
        (0.12 / whole, "upside down"),
        (1500, "not a percentage"),
        (1 - 0.12 / whole, "share of the wait"),
        (20.0, "not what your two measurements give"),
        ("soon", "give a number"),
    ] + [(streamed_e2e / 0.12, "with itself")] * (streamed_e2e < 1.7):
        assert not checks.check_streaming_gain(wrong, sooner, whole, streamed)
        assert hint in capsys.readouterr().out
    assert not checks.check_streaming_gain(None, sooner, whole, streamed)
    assert "Not attempted yet" in capsys.readouterr().out
