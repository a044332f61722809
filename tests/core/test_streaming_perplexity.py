"""Reading a long text through a cache: the same perplexity through any cache that keeps every token,
per-segment figures that add up, and errors before any work."""

import math

import pytest

from labkit.core.sink_cache import SinkKVCache
from labkit.core.streaming_perplexity import LongRead, read_long_text, reads_table
from labkit.quant.quantized_kv import new_kv_cache

from .conftest import random_ids


def test_a_sink_cache_that_keeps_everything_reads_as_a_kv_cache(tiny):
    ids = random_ids(1, 100)
    full = read_long_text(tiny, ids, tiny.new_cache(max_length=128), chunk=32, segment=40, progress=False)
    sink = SinkKVCache.for_model(tiny, sinks=4, window=200, chunk=32)
    streamed = read_long_text(tiny, ids, sink, chunk=32, segment=40, progress=False)
    assert math.isclose(full.perplexity, streamed.perplexity, rel_tol=1e-5)
    assert full.n_tokens == 100 and len(full.segment_perplexities) == 3  # 99 positions: 40, 40, 19
    assert full.segment_starts == (0, 40, 80) and full.max_cache_length == 99
    assert full.label == "KVCache" and streamed.label == "SinkKVCache 4 sinks + 200 window"


def test_the_whole_perplexity_is_the_segments_geometric_mean_weighted_by_size(tiny):
    read = read_long_text(
        tiny, random_ids(1, 81), tiny.new_cache(max_length=96), chunk=16, segment=40, progress=False
    )
    logs = [math.log(p) for p in read.segment_perplexities]
    assert math.isclose(read.perplexity, math.exp((40 * logs[0] + 40 * logs[1]) / 80), rel_tol=1e-5)


def test_a_window_keeps_the_cache_short_and_a_quantized_cache_reads_too(tiny):
    ids = random_ids(1, 120)
    window = read_long_text(tiny, ids, SinkKVCache.for_model(tiny, 0, 30, chunk=16), chunk=16, progress=False)
    assert window.max_cache_length == 30 and math.isfinite(window.perplexity)
    int8 = read_long_text(tiny, ids, new_kv_cache(tiny, 1, 128, "int8"), chunk=16, progress=False)
    assert int8.label == "QuantizedKVCache" and math.isfinite(int8.perplexity)


def test_the_table_has_a_column_per_read_and_a_row_per_segment(tiny):
    ids = random_ids(1, 50)
    reads = [
        read_long_text(tiny, ids, cache, chunk=16, segment=20, progress=False)
        for cache in (tiny.new_cache(max_length=64), SinkKVCache.for_model(tiny, 2, 10, chunk=16))
    ]
    text = str(reads_table(reads))
    assert "SinkKVCache 2 sinks + 10 window" in text and "KVCache" in text
    assert [line.split()[0] for line in text.splitlines()[2:]] == ["0-19", "20-39", "40-48", "all", "seconds"]
    assert str(reads[0]).splitlines()[1].split() == ["positions", "KVCache"]


def test_reads_with_different_segments_do_not_share_a_table():
    reads = [LongRead("a", 10, segment, 1.0, (1.0,), 0.1, 9) for segment in (5, 9)]
    with pytest.raises(ValueError, match="share one segment size"):
        reads_table(reads)


def test_what_cannot_be_read_is_refused_before_any_work(tiny):
    with pytest.raises(ValueError, match="this KVCache holds 64"):
        read_long_text(tiny, random_ids(1, 100), tiny.new_cache(max_length=64), progress=False)
    with pytest.raises(ValueError, match="the model's context is 512"):
        read_long_text(tiny, random_ids(1, 600), tiny.new_cache(max_length=512), progress=False)
    with pytest.raises(ValueError, match="chunk=32 is more than this SinkKVCache takes a pass"):
        read_long_text(tiny, random_ids(1, 100), SinkKVCache.for_model(tiny, 0, 8, chunk=16), chunk=32)
    with pytest.raises(ValueError, match=r"one row of at least 2 integer token ids \[1, N\]"):
        read_long_text(tiny, random_ids(1, 1), tiny.new_cache(max_length=8))
    with pytest.raises(TypeError, match="cache must be a labkit cache"):
        read_long_text(tiny, random_ids(1, 10), object())
