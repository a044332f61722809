"""labkit.metrics: TTFT, TPOT, tokens/s, E2E and peak memory, read off the Step stream of generate."""

import math
import subprocess
import sys

import pytest

import labkit
from labkit import metrics
from labkit.decoding.request import Step


class FakeClock:
    """A perf_counter that moves only when told to."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def fake_steps(clock, gaps, finish="length"):
    """Steps that arrive `gaps[i]` seconds after the previous one (the first after the start)."""
    for index, gap in enumerate(gaps):
        clock.now += gap
        yield Step(
            token_id=index,
            text=str(index),
            logprob=-1.0,
            finish_reason=finish if index == len(gaps) - 1 else None,
        )


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(metrics.time, "perf_counter", fake)
    return fake


def test_metrics_from_known_arrival_times(clock):
    stream = metrics.timed(fake_steps(clock, [0.5, 0.1, 0.1, 0.2]), track_memory=False)
    steps = list(stream)
    assert [s.token_id for s in steps] == [0, 1, 2, 3]  # passed through unchanged
    result = stream.metrics()
    assert result.output_tokens == 4
    assert result.ttft_s == pytest.approx(0.5)
    assert result.e2e_s == pytest.approx(0.9)
    assert result.tpot_s == pytest.approx(0.4 / 3)
    assert result.tokens_per_s == pytest.approx(4 / 0.9)
    assert result.decode_tokens_per_s == pytest.approx(3 / 0.4)
    assert result.inter_token_s == pytest.approx([0.5, 0.1, 0.1, 0.2])
    assert result.finish_reason == "length"
    assert str(result) == "RequestMetrics(4 tokens: TTFT 500.0 ms, TPOT 133.3 ms, 4.4 tokens/s, E2E 0.90 s)"


def test_start_can_be_given_as_the_request_arrival(clock):
    arrival = clock.now - 1.0  # the request waited a second before the stream was made
    result = (
        metrics.timed(fake_steps(clock, [0.5, 0.1]), start=arrival, track_memory=False).consume().metrics()
    )
    assert result.ttft_s == pytest.approx(1.5) and result.e2e_s == pytest.approx(1.6)


def test_one_token_has_no_tpot(clock):
    result = metrics.timed(fake_steps(clock, [0.3]), track_memory=False).consume().metrics()
    assert result.output_tokens == 1 and math.isnan(result.tpot_s) and math.isnan(result.decode_tokens_per_s)


def test_metrics_before_any_token_is_a_clear_error():
    stream = metrics.timed(iter([]), track_memory=False)
    with pytest.raises(ValueError, match="No tokens yet: iterate over the stream"):
        stream.metrics()


def test_real_generate_stream_is_unchanged_and_measured(tokenizer):
    model = labkit.tiny_model("labkit")
    expected = labkit.generate_ids(model, tokenizer, "Once upon a time", max_new_tokens=10)
    stream = metrics.timed(labkit.generate(model, tokenizer, "Once upon a time", max_new_tokens=10))
    assert [step.token_id for step in stream] == expected
    result = stream.metrics()
    assert result.output_tokens == 10 and len(result.token_times_s) == 10
    assert 0 < result.ttft_s <= result.e2e_s
    assert list(result.token_times_s) == sorted(result.token_times_s)
    assert result.tpot_s == pytest.approx((result.e2e_s - result.ttft_s) / 9)
    if sys.platform == "linux":
        assert result.memory_source == "process peak RSS"
        assert result.peak_memory_bytes >= 10**7  # at least the torch runtime and the model


def test_measure_counts_the_prompt_and_passes_options(tokenizer):
    model = labkit.tiny_model("labkit")
    steps, result = metrics.measure(model, tokenizer, "Hello there", max_new_tokens=4, use_cache=False)
    assert len(steps) == 4 and result.output_tokens == 4
    assert result.prompt_tokens == len(tokenizer("Hello there")["input_ids"])
    assert [s.token_id for s in steps] == labkit.generate_ids(
        model, tokenizer, "Hello there", max_new_tokens=4
    )


def test_summary_and_table(clock):
    first = metrics.timed(fake_steps(clock, [0.2, 0.1, 0.1]), track_memory=False).consume().metrics()
    second = metrics.timed(fake_steps(clock, [0.4, 0.3]), track_memory=False).consume().metrics()
    summary = metrics.summarize([first, second])
    assert summary["requests"] == 2 and summary["output_tokens"] == 5
    assert summary["ttft_mean_s"] == pytest.approx(0.3)
    assert summary["throughput_tokens_per_s"] == pytest.approx(5 / 1.1)
    assert metrics.summarize([first, second], wall_s=0.5)["throughput_tokens_per_s"] == pytest.approx(10)
    assert math.isnan(summary["peak_memory_bytes"])
    table = metrics.metrics_table([first, second], ["short", "long"]).splitlines()
    assert table[0].split() == [
        "request",
        "prompt",
        "output",
        "TTFT",
        "ms",
        "TPOT",
        "ms",
        "tok/s",
        "E2E",
        "s",
        "peak",
        "GB",
    ]
    assert table[1].split() == ["short", "-", "3", "200.0", "100.0", "7.5", "0.40", "-"]
    with pytest.raises(ValueError, match="No requests"):
        metrics.summarize([])
    with pytest.raises(ValueError, match="2 names for 1 requests"):
        metrics.metrics_table([first], ["a", "b"])


def test_percentile():
    assert metrics.percentile([3, 1, 2], 50) == 2
    assert metrics.percentile([1, 2], 90) == pytest.approx(1.9)
    with pytest.raises(ValueError, match="q must be between 0 and 100"):
        metrics.percentile([1], 120)


PEAK_SCRIPT = """
import torch
from labkit import metrics
tracker = metrics.PeakMemory()
tracker.start()
before = metrics.current_memory_bytes()
block = torch.ones(200_000_000, dtype=torch.uint8)  # 200 MB, touched (fresh pages from the OS)
del block
print(tracker.peak() - before)
"""


def test_peak_memory_sees_a_large_allocation():
    """In a fresh process: in this one, after hundreds of tests, gigabytes of cold pages may be reclaimed by
    the kernel while the 200 MB are touched, and the resident peak need not rise at all (seen on CI)."""
    if sys.platform != "linux":
        pytest.skip("the per-request peak needs Linux's /proc/self/clear_refs")
    done = subprocess.run([sys.executable, "-c", PEAK_SCRIPT], capture_output=True, text=True, check=True)
    assert int(done.stdout.split()[-1]) >= 150_000_000, done.stdout


def test_timing_helpers_warm_up_once_then_time_each_repeat_and_refuse_none():
    from labkit.timing import best_seconds, repeat_seconds

    calls = []
    assert len(repeat_seconds(lambda: calls.append(1), repeats=3)) == 3 and len(calls) == 4  # one warm-up
    for repeats in (0, 2.0, True):
        with pytest.raises(ValueError, match="repeats must be a whole number of 1 or more, got "):
            best_seconds(lambda: None, repeats=repeats)
