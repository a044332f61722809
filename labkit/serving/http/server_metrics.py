"""The server's Prometheus metrics, in a registry of its own (two servers in one process never clash).

TTFT, TPOT and the queue time are observed when a request finishes (the engine's own clock, queue time
included in TTFT, as vLLM's `request_queue_time_seconds` beside its TTFT); running and waiting requests and KV blocks are set after every engine step.
The prefix cache's queries and hits count prompt tokens, as vLLM's `prefix_cache_queries` and `_hits` do:
each request's prompt when it ends, and the tokens of it the cache held when it was first admitted.

    >>> metrics = ServerMetrics()
    >>> metrics.render()[:40]
    b'# HELP labkit_time_to_first_token_secon'
"""

from __future__ import annotations

import math

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from labkit.serving.request import EngineRequestMetrics

TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)  # seconds, queue included
TPOT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)  # seconds per output token


class ServerMetrics:
    """Histograms, gauges and counters the engine thread updates and `/metrics` renders."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttft = Histogram(
            "labkit_time_to_first_token_seconds",
            "Arrival to first token, queue included.",
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.queue = Histogram(
            "labkit_request_queue_time_seconds",
            "Arrival to first scheduled (waiting for a seat).",
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.tpot = Histogram(
            "labkit_time_per_output_token_seconds",
            "Mean gap between later tokens of a request.",
            buckets=TPOT_BUCKETS,
            registry=r,
        )
        self.running = Gauge(
            "labkit_requests_running", "Requests holding KV blocks and decoding.", registry=r
        )
        self.waiting = Gauge("labkit_requests_waiting", "Requests queued for admission.", registry=r)
        self.blocks_used = Gauge("labkit_kv_blocks_used", "KV-cache blocks in use.", registry=r)
        self.blocks_total = Gauge("labkit_kv_blocks_total", "KV-cache blocks in the pool.", registry=r)
        self.window_blocks: tuple[Gauge, Gauge] | None = None  # a Gemma3's local layers' (set_load)
        self.finished = Counter(
            "labkit_requests_finished", "Requests that ended, by reason.", ["reason"], registry=r
        )
        self.rejected = Counter(
            "labkit_requests_rejected", "Requests refused because the queue was full.", registry=r
        )
        self.generated = Counter("labkit_generation_tokens", "Tokens generated.", registry=r)
        # vLLM's vllm:prefix_cache_queries / _hits, in tokens: hits / queries is the prefix cache's hit rate
        self.prefix_queries = Counter(
            "labkit_prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", registry=r
        )
        self.prefix_hits = Counter(
            "labkit_prefix_cache_hits", "Prompt tokens found in the prefix cache (whole blocks).", registry=r
        )
        # speculative decoding, under vLLM's and llama-server's names (vllm:spec_decode_num_draft_tokens,
        # llamacpp:spec_decode_num_accepted_tokens_total): accepted / drafted is the acceptance rate
        self.draft_tokens = Counter(
            "labkit_spec_decode_num_draft_tokens", "Draft tokens fed for verification.", registry=r
        )
        self.accepted_tokens = Counter(
            "labkit_spec_decode_num_accepted_tokens", "Draft tokens the target model kept.", registry=r
        )

    def observe_finished(self, request: EngineRequestMetrics) -> None:
        """Record a finished or aborted request's TTFT, TPOT, reason and draft tokens (fed, kept)."""
        if not math.isnan(request.ttft_s):
            self.ttft.observe(request.ttft_s)
        if not math.isnan(request.queue_s):
            self.queue.observe(request.queue_s)
        if not math.isnan(request.tpot_s):
            self.tpot.observe(request.tpot_s)
        self.finished.labels(request.finish_reason or "unknown").inc()
        self.draft_tokens.inc(request.draft_n)
        self.accepted_tokens.inc(request.draft_n_accepted)

    def observe_prefix(self, prompt_tokens: int, cached_tokens: int | None) -> None:
        """Count a request's prompt in the prefix cache's queries and its cached tokens in its hits; a
        request never admitted (cached_tokens None) was never looked up, and counts in neither."""
        if cached_tokens is None:
            return
        self.prefix_queries.inc(prompt_tokens)
        self.prefix_hits.inc(cached_tokens)

    def set_load(
        self,
        running: int,
        waiting: int,
        blocks_used: int,
        blocks_total: int,
        window_blocks: tuple[int, int] | None = None,
    ) -> None:
        """The load gauges; window_blocks, (used, total) of a Gemma3's sliding-window layers' pool, adds
        labkit_kv_window_blocks_used and _total the first time it is given (a Llama's metrics have neither)."""
        self.running.set(running)
        self.waiting.set(waiting)
        self.blocks_used.set(blocks_used)
        self.blocks_total.set(blocks_total)
        if window_blocks is None:
            return
        if self.window_blocks is None:
            self.window_blocks = (
                Gauge(
                    "labkit_kv_window_blocks_used",
                    "Sliding-window layers' KV blocks in use.",
                    registry=self.registry,
                ),
                Gauge(
                    "labkit_kv_window_blocks_total",
                    "Sliding-window layers' KV blocks in their pool.",
                    registry=self.registry,
                ),
            )
        for gauge, value in zip(self.window_blocks, window_blocks):
            gauge.set(value)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
