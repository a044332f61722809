"""Exercise checkers for serving over HTTP, notebook 11 (see labkit/checks/foundation.py for the style).

>>> checks.check_client_metrics(client_metrics)
>>> checks.check_sse_parser(parse_events)
>>> checks.check_littles_law(answer)
>>> checks.check_streaming_gain(answer, sooner, whole_answer_s, streamed)
"""

from __future__ import annotations

import math
from collections.abc import Callable

from labkit.checks.common import matching_hint, not_attempted, read_number, verdict
from labkit.checks.work import choice_verdict, progressive, refuse_unmeasured, reset, run_own
from labkit.loadtest.client import client_tpot, parse_sse

__all__ = ["check_client_metrics", "check_littles_law", "check_sse_parser", "check_streaming_gain"]

# (sent at, token arrival times): perf_counter seconds, as a client notes them
METRIC_CASES = [
    (100.0, [100.25, 100.35, 100.45, 100.55]),
    (7.5, [8.0, 8.1]),
    (0.0, [0.3, 0.5, 0.6, 0.9, 1.3]),
    (2.0, [2.4]),
]
SSE_CASES = [
    ('data: {"n": 1}\n\ndata: {"n": 2}\n\ndata: [DONE]\n\n', "two events then [DONE]"),
    ('data:{"n": 1}\n\ndata: [DONE]\n\n', "'data:' without the space"),
    (': keep-alive\n\ndata: {"n": 1}\n\n: ping\n\ndata: [DONE]\n\n', "comment lines (starting with ':')"),
    ('data: {"n": 1}\n\ndata: [DONE]\n\ndata: {"n": 2}\n\n', "anything after [DONE]"),
    ('data: {"choices": [], "usage": {"completion_tokens": 3}}\n\n', "a stream that ends without [DONE]"),
]


def _close(got, expected: float) -> bool:
    if math.isnan(expected):
        return got is None or (isinstance(got, float) and math.isnan(got))
    try:
        return math.isclose(float(got), expected, rel_tol=1e-6, abs_tol=1e-9)
    except (TypeError, ValueError):
        return False


def metrics_hint(sent: float, arrivals: list[float], ttft, tpot) -> str | None:
    """A hint for a wrong (ttft, tpot) pair, or None when both are right."""
    n, ttft_ok = len(arrivals), arrivals[0] - sent
    tpot_ok = client_tpot(ttft_ok, arrivals[-1] - sent, n)
    where = f"sent at {sent}, tokens at {arrivals}"
    if _close(ttft, arrivals[0]) and sent != 0:
        return f"{where}: TTFT counts from when the request was sent: subtract `sent`."
    if not _close(ttft, ttft_ok):
        return f"{where}: your TTFT is {ttft!r}, but TTFT is the first token's arrival minus the send time."
    if n > 1 and _close(tpot, (arrivals[-1] - arrivals[0]) / n):
        return f"{where}: {n} tokens leave {n - 1} gaps after the first: divide by n - 1, not n."
    if n > 1 and _close(tpot, (arrivals[-1] - sent) / n):
        return f"{where}: TPOT leaves out the first token's wait (that is TTFT): (E2E - TTFT) / (n - 1)."
    if not _close(tpot, tpot_ok):
        if n == 1:
            return (
                f"{where}: your TPOT is {tpot!r}, but one token leaves no gap to average, so TPOT is undefined "
                "here: return what the exercise asks for that case."
            )
        return f"{where}: your TPOT is {tpot!r}: TPOT is the mean gap between the tokens after the first."
    return None


def check_client_metrics(fn: Callable | None) -> bool:
    """Exercise: fn(sent_s, arrivals_s) -> (ttft_s, tpot_s) of one streamed answer, from the client's clock.
    Calling labkit's own client_tpot does not count."""
    if fn is None:
        return not_attempted("your function client_metrics(sent_s, arrivals_s)")
    for sent, arrivals in METRIC_CASES:
        got, error = run_own(fn, sent, list(arrivals), references=[client_tpot])
        if error:
            return verdict(False, f"client_metrics({sent}, {arrivals}): {error}")
        try:
            ttft, tpot = got
        except (TypeError, ValueError):
            return verdict(
                False, f"client_metrics({sent}, {arrivals}) should return a pair (ttft, tpot), got {got!r}."
            )
        hint = metrics_hint(sent, arrivals, ttft, tpot)
        if hint:
            return verdict(False, hint)
    return verdict(
        True, "TTFT = first token - sent; TPOT = (last - first) / (n - 1), undefined for one token."
    )


def check_sse_parser(fn: Callable | None) -> bool:
    """Exercise: fn(raw) -> the JSON payloads (dicts) of an SSE body, in order, up to `data: [DONE]`. Calling
    labkit's own parse_sse does not count."""
    if fn is None:
        return not_attempted("your function parse_events(raw)")
    for raw, what in SSE_CASES:
        expected = parse_sse(raw)
        got, error = run_own(fn, raw, references=[parse_sse])
        if error:
            hint = (
                " Only 'data:' lines carry JSON, and 'data: [DONE]' is not JSON: skip the other lines and stop "
                "at [DONE]."
                if "JSON" in error
                else ""
            )
            return verdict(False, f"with {what}, parse_events: {error}.{hint}")
        if got == expected:
            continue
        if isinstance(got, list) and got and all(isinstance(g, str) for g in got):
            return verdict(
                False, f"with {what}: return each payload parsed with json.loads (dicts), not strings."
            )
        if isinstance(got, list) and len(got) > len(expected) and got[: len(expected)] == expected:
            return verdict(False, f"with {what}: stop at 'data: [DONE]': it ends the stream and is not JSON.")
        return verdict(
            False,
            f"with {what}, parse_events gave {got!r}. Keep every 'data:' line's JSON (with or "
            "without a space after the colon), skip ':' comment lines, and stop at 'data: [DONE]' "
            "or at the end of the body.",
        )
    return verdict(
        True, "events are 'data:' lines separated by blank lines; ':' lines are comments; [DONE] ends it."
    )


def littles_law_verdict(answer: float | None, in_flight: float, latency_s: float) -> bool:
    """Exercise: a server keeps `in_flight` requests in progress, each taking `latency_s` seconds end to end:
    how many requests per second does it complete? (Little's law: L = lambda W.)"""
    value, refusal = read_number(
        answer, "a number of requests per second", number="a number of requests per second"
    )
    if refusal is not None:
        return refusal
    expected = in_flight / latency_s
    if math.isclose(value, expected, rel_tol=1e-3):
        reset("littles_law")
        return verdict(
            True,
            f"in flight = throughput x latency (Little's law), so throughput = {in_flight:g} / "
            f"{latency_s:g} s.",
        )
    if math.isclose(value, in_flight * latency_s, rel_tol=1e-3):
        return verdict(False, "check the units: requests x seconds is not requests per second.")
    if math.isclose(value, latency_s / in_flight, rel_tol=1e-3):
        return verdict(False, "upside down: that is seconds per request.")
    if math.isclose(value, 1 / latency_s, rel_tol=1e-3):
        return verdict(False, "that is one client's rate; all the requests in flight complete in parallel.")
    return verdict(
        False,
        f"{value:g} is not it. "
        + progressive(
            "littles_law",
            [
                "In a steady state, how many requests are in progress depends on how fast they arrive and how long each "
                "stays: follow the units.",
                "Little's law: requests in flight = requests/s x seconds each.",
            ],
        ),
    )


# Notebook 11's Exercise 3: the checker owns its problem, so an answer to a problem a student changed
# counts for nothing; littles_law_verdict checks any other (the tests' cases).
LITTLES_LAW_PROBLEM = {"in_flight": 16, "latency_s": 2.5}


def check_littles_law(answer: float | None) -> bool:
    """Exercise (11, Exercise 3): requests per second from 16 always in progress, each taking 2.5 s? (LITTLES_LAW_PROBLEM)."""
    return littles_law_verdict(answer, **LITTLES_LAW_PROBLEM)


# what streaming changes for a user: the choices of exercise 4
STREAMING_CHANGES = {
    "first token": "the user starts reading sooner; the answer ends no sooner",
    "last token": "the whole answer arrives sooner; reading starts no sooner",
    "both": "reading starts sooner and the answer ends sooner",
}


def check_streaming_gain(answer: float | None, sooner: str | None, whole_answer_s: float, streamed) -> bool:
    """Exercise (11): how many times sooner does a user who streams see the first token than one who waits for
    the whole answer sees anything (whole_answer_s / streamed.ttft_s, within 3 %), and what comes sooner (one
    of STREAMING_CHANGES)? `streamed` is the measured stream (its ttft_s and e2e_s)."""
    value, refusal = read_number(
        answer,
        "a ratio (the whole answer's time / the streamed answer's TTFT) and what comes sooner",
        others=(sooner,),
    )
    if refusal is not None:
        return refusal
    unmeasured = refuse_unmeasured(
        "time the whole answer with time_once(...) and stream it with stream_openai(...), as the cell above does",
        whole_answer_s=whole_answer_s,
        streamed=streamed,
    )
    if unmeasured is not None:
        return unmeasured
    ttft_s, e2e_s = streamed.ttft_s, streamed.e2e_s
    expected = whole_answer_s / ttft_s
    hints = [
        (1 / expected, "upside down: the longer wait goes on top."),
        (100 * expected, "give a ratio, not a percentage."),
        (1 - 1 / expected, "that is the share of the wait saved; give the ratio of the two times."),
        (
            e2e_s / ttft_s,
            "that compares the streamed answer with itself: use the wait of the user who did not stream.",
        ),
    ]
    if abs(value - expected) > 0.03 * expected:
        return verdict(
            False,
            matching_hint(value, hints, rel_tol=0.03)
            or progressive(
                "streaming_gain",
                [
                    f"{value:g} is not what your two measurements give. Each user waits from the send until they see "
                    "something: compare those two waits.",
                    f"{value:g} is not it. The user who waits for the whole answer sees nothing until it arrives; the one "
                    "who streams sees the first token at TTFT: divide the first by the second.",
                ],
            ),
        )
    return choice_verdict(
        sooner,
        STREAMING_CHANGES,
        "both" if e2e_s < 0.8 * whole_answer_s else "first token",
        "compare when each answer's last token arrived, as well as its first.",
        name="sooner",
        exercise="streaming_gain",
        right_so_far="the ratio is right",
        passed=f"streamed, TTFT was {ttft_s * 1e3:.0f} ms. Under load (section "
        "5) it also waits for a free seat in the batch, so TTFT grows with the queue.",
    )
