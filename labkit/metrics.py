"""The metrics of inference, read off the token stream of `labkit.generate` (notebook 07).

`timed(steps)` wraps the iterator that `generate` returns: it passes every `Step` through unchanged
and notes the moment each one arrived. No second code path: the numbers describe the very loop that
produced the text.

- **TTFT**, time to first token: request start -> first token (tokenizing, prefill, first choice).
- **TPOT**, time per output token: the mean gap between later tokens, (E2E - TTFT) / (n - 1): decode.
- **tokens/s**: output tokens / E2E for the request; 1 / TPOT for decode alone.
- **E2E latency**: request start -> last token.
- **peak memory**: the process's peak resident memory during the request (on Linux; or the CUDA
  allocator's peak when the model runs on a GPU).

    >>> stream = timed(labkit.generate(model, tokenizer, prompt, max_new_tokens=32))
    >>> for step in stream:
    ...     print(step.text, end="")
    >>> print(stream.metrics())
    RequestMetrics(32 tokens: TTFT 41.2 ms, TPOT 22.0 ms, 42.9 tokens/s, E2E 0.75 s, peak 0.90 GB)
"""

from __future__ import annotations

import math
import re
import resource
import statistics
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

from labkit.core.doors import check_items
from labkit.core.forward import model_device
from labkit.core.text import encode_prompt
from labkit.decoding.generate import generate
from labkit.decoding.request import Step
from labkit.table import Column, format_table


@dataclass(frozen=True)
class RequestMetrics:
    """What one request cost. Times in seconds, since the request started."""

    output_tokens: int  # tokens generated (EOS included when it ended the request)
    ttft_s: float  # time to first token
    tpot_s: float  # time per output token after the first (nan for a 1-token answer)
    e2e_s: float  # end-to-end latency: until the last token
    token_times_s: tuple[float, ...] = field(repr=False)  # when each token arrived
    peak_memory_bytes: int | None = None  # None where it cannot be measured
    memory_source: str = "unmeasured"  # "process peak RSS", "process peak RSS since start", "cuda allocator"
    prompt_tokens: int | None = None
    finish_reason: str | None = None

    @property
    def tokens_per_s(self) -> float:
        """Output tokens / E2E latency: the request's throughput, prefill included."""
        return self.output_tokens / self.e2e_s if self.e2e_s > 0 else math.nan

    @property
    def decode_tokens_per_s(self) -> float:
        """1 / TPOT: the rate of the decode phase alone."""
        return 1 / self.tpot_s if self.tpot_s > 0 else math.nan

    @property
    def inter_token_s(self) -> list[float]:
        """The gap before each token (the first one's is the TTFT)."""
        times = self.token_times_s
        return [times[0]] + [b - a for a, b in zip(times, times[1:])] if times else []

    def __str__(self) -> str:
        memory = "" if self.peak_memory_bytes is None else f", peak {self.peak_memory_bytes / 1e9:.2f} GB"
        return (
            f"RequestMetrics({self.output_tokens} tokens: TTFT {self.ttft_s * 1e3:.1f} ms, "
            f"TPOT {self.tpot_s * 1e3:.1f} ms, {self.tokens_per_s:.1f} tokens/s, "
            f"E2E {self.e2e_s:.2f} s{memory})"
        )


class PeakMemory:
    """Peak memory between `start()` and `peak()`.

    On Linux the process's peak resident set (VmHWM) can be reset (/proc/self/clear_refs), so the peak
    is this request's. Elsewhere `ru_maxrss` is the peak since the process started. On a GPU, the
    CUDA allocator's peak.
    """

    def __init__(self):
        self.source = "unmeasured"

    def start(self) -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.reset_peak_memory_stats()
        try:
            with open("/proc/self/clear_refs", "w") as clear:
                clear.write("5")  # reset VmHWM, the peak resident set size, to the current one
            self.source = "process peak RSS"
        except OSError:
            self.source = "process peak RSS since start"

    def peak(self, device: torch.device | None = None) -> int | None:
        if device is not None and device.type == "cuda":
            self.source = "cuda allocator"
            return int(torch.cuda.max_memory_allocated(device))
        status = _proc_status_kib("VmHWM")
        if status is not None and self.source == "process peak RSS":
            return status * 1024
        self.source = "process peak RSS since start"
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(maxrss if sys.platform == "darwin" else maxrss * 1024)  # bytes on macOS, KiB on Linux


def _proc_status_kib(key: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            match = re.search(rf"^{key}:\s+(\d+) kB", status.read(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) if match else None


def current_memory_bytes() -> int | None:
    """The process's resident memory now (Linux), or None."""
    kib = _proc_status_kib("VmRSS")
    return None if kib is None else kib * 1024


class TimedSteps(Iterator[Step]):
    """An iterator over `steps` that timestamps each one as it arrives (see `timed`)."""

    def __init__(
        self,
        steps: Iterable[Step],
        start: float | None = None,
        prompt_tokens: int | None = None,
        track_memory: bool = True,
        device: torch.device | None = None,
    ):
        self._steps = iter(steps)
        self.device = device  # where the model runs: a CUDA device's peak is its allocator's
        self.memory = PeakMemory() if track_memory else None
        if self.memory is not None:
            self.memory.start()
        self.start = time.perf_counter() if start is None else start
        self.prompt_tokens = prompt_tokens
        self.token_ids: list[int] = []
        self.finish_reason: str | None = None
        self.times: list[float] = []  # seconds since start, one per step
        self._peak: int | None = None
        self._done = False

    def __next__(self) -> Step:
        try:
            step = next(self._steps)
        except StopIteration:
            self._finish(None)
            raise
        self.times.append(time.perf_counter() - self.start)
        self.token_ids.append(step.token_id)  # ids only: a Step may carry a vocabulary of logits
        self.finish_reason = step.finish_reason
        if step.finish_reason is not None:
            self._finish(step)
        return step

    def _finish(self, last: Step | None) -> None:
        if self._done:
            return
        self._done = True
        if self.memory is not None:
            self._peak = self.memory.peak(self.device)

    def consume(self) -> TimedSteps:
        """Run the stream to its end without printing anything; returns self."""
        for _ in self:
            pass
        return self

    def metrics(self) -> RequestMetrics:
        """The request's metrics (call once the stream has ended)."""
        if not self.times:
            raise ValueError(
                "No tokens yet: iterate over the stream (or call .consume()) before asking for metrics."
            )
        n, ttft, e2e = len(self.times), self.times[0], self.times[-1]
        if not self._done:
            self._finish(None)
        return RequestMetrics(
            output_tokens=n,
            ttft_s=ttft,
            tpot_s=time_per_output_token(ttft, e2e, n),
            e2e_s=e2e,
            token_times_s=tuple(self.times),
            peak_memory_bytes=self._peak,
            memory_source=self.memory.source if self.memory is not None else "unmeasured",
            prompt_tokens=self.prompt_tokens,
            finish_reason=self.finish_reason,
        )


def timed(
    steps: Iterable[Step],
    start: float | None = None,
    prompt_tokens: int | None = None,
    track_memory: bool = True,
    device: torch.device | None = None,
) -> TimedSteps:
    """Wrap the stream from `labkit.generate` so that it records when each token arrives.

    start: the request's start (a `time.perf_counter()` value); by default, now. Make the wrapper
    right after calling `generate` (the loop only starts running when it is iterated).
    """
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Iterable):
        raise TypeError(
            f"steps must be the stream of Step that labkit.generate returns, got {type(steps).__name__}."
        )
    return TimedSteps(
        steps, start=start, prompt_tokens=prompt_tokens, track_memory=track_memory, device=device
    )


def measure(
    model: torch.nn.Module, tokenizer, prompt, track_memory: bool = True, **options
) -> tuple[list[Step], RequestMetrics]:
    """Run one request through `labkit.generate` and return (its steps, its metrics).

    The clock starts before the prompt is tokenized, as a server's would when the request arrives.
    options: anything `generate` takes (max_new_tokens, temperature, use_cache, ...).
    """
    start = time.perf_counter()
    prompt_tokens = len(encode_prompt(tokenizer, prompt))
    stream = timed(
        generate(model, tokenizer, prompt, **options),
        start=start,
        prompt_tokens=prompt_tokens,
        track_memory=track_memory,
        device=model_device(model),
    )
    steps = list(stream)
    return steps, stream.metrics()


def summarize(requests: Sequence[RequestMetrics], wall_s: float | None = None) -> dict[str, float]:
    """Aggregate metrics of several requests.

    wall_s: the wall-clock time all of them took; by default the sum of their E2E latencies (requests
    served one after another). Throughput = all output tokens / wall_s.
    """
    check_items(
        "requests", requests, "RequestMetrics (labkit.metrics.measure)", has=("output_tokens", "e2e_s")
    )
    if not requests:
        raise ValueError("No requests to summarize.")
    tokens = sum(r.output_tokens for r in requests)
    wall = sum(r.e2e_s for r in requests) if wall_s is None else wall_s
    tpots = [r.tpot_s for r in requests if not math.isnan(r.tpot_s)]
    peaks = [r.peak_memory_bytes for r in requests if r.peak_memory_bytes is not None]
    return {
        "requests": len(requests),
        "output_tokens": tokens,
        "ttft_mean_s": statistics.mean(r.ttft_s for r in requests),
        "ttft_p50_s": percentile([r.ttft_s for r in requests], 50),
        "ttft_p90_s": percentile([r.ttft_s for r in requests], 90),
        "tpot_mean_s": statistics.mean(tpots) if tpots else math.nan,
        "e2e_mean_s": statistics.mean(r.e2e_s for r in requests),
        "e2e_p90_s": percentile([r.e2e_s for r in requests], 90),
        "throughput_tokens_per_s": tokens / wall if wall > 0 else math.nan,
        "peak_memory_bytes": max(peaks) if peaks else math.nan,
    }


def time_per_output_token(ttft_s: float, e2e_s: float, output_tokens: int) -> float:
    """(E2E - TTFT) / (n - 1): the mean gap between tokens after the first (nan for n < 2). The one TPOT
    formula: RequestMetrics, the HTTP client (`client_tpot`) and the serving engine's requests all use it.

    >>> time_per_output_token(0.2, 1.6, 15)
    0.1
    """
    return (e2e_s - ttft_s) / (output_tokens - 1) if output_tokens > 1 else math.nan


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of values, linearly interpolated."""
    if not values:
        raise ValueError("No values.")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be between 0 and 100, got {q}.")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def metrics_table(requests: Sequence[RequestMetrics], names: Sequence[str] | None = None) -> str:
    """One row per request: prompt and output tokens, TTFT, TPOT, tokens/s, E2E, peak memory."""
    check_items(
        "requests", requests, "RequestMetrics (labkit.metrics.measure)", has=("output_tokens", "e2e_s")
    )
    names = list(names) if names is not None else [str(i + 1) for i in range(len(requests))]
    if len(names) != len(requests):
        raise ValueError(f"{len(names)} names for {len(requests)} requests.")
    columns = [
        Column("request", max(len("request"), *(len(n) for n in names)), align="<"),
        Column("prompt", 6),
        Column("output", 6),
        Column("TTFT ms", 8, ".1f"),
        Column("TPOT ms", 8, ".1f"),
        Column("tok/s", 6, ".1f"),
        Column("E2E s", 6, ".2f"),
        Column("peak GB", 7),
    ]
    rows = [
        [
            name,
            "-" if r.prompt_tokens is None else str(r.prompt_tokens),
            r.output_tokens,
            r.ttft_s * 1e3,
            r.tpot_s * 1e3,
            r.tokens_per_s,
            r.e2e_s,
            "-" if r.peak_memory_bytes is None else f"{r.peak_memory_bytes / 1e9:.2f}",
        ]
        for name, r in zip(names, requests)
    ]
    return format_table(columns, rows, gap="  ")


__all__ = [
    "PeakMemory",
    "RequestMetrics",
    "TimedSteps",
    "current_memory_bytes",
    "measure",
    "metrics_table",
    "percentile",
    "summarize",
    "time_per_output_token",
    "timed",
]
