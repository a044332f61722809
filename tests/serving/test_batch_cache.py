"""The two layouts of a mixed batch over the paged pool: rows right-padded (`BatchKV`) and rows end to end
(`PackedKV`) give each row the logits of that row alone, and the packed layout refuses what it cannot hold."""

import pytest
import torch

from labkit.core.paged import BlockPool
from labkit.serving.batch_cache import PackedKV
from labkit.serving.runner import forward_packed, forward_padded

TINY_ATOL = 1e-4  # float32, other shapes: see tests/serving/test_engine.py


def prefill(model, pool, table, ids):
    """Put ids' keys and values in the pool blocks of `table` (one row, from position 0)."""
    forward_padded(model, pool, [ids], [table], [0])


def test_packed_and_padded_rows_each_equal_the_row_alone(tiny, one_thread):
    pool = BlockPool.for_model(tiny, n_blocks=12, block_size=4)
    decoding, prompt = [5, 9, 13, 2, 7, 7, 30], [11, 3, 8, 21, 4, 6, 1, 19, 40]
    prefill(tiny, pool, [0, 1], decoding[:-1])  # row 0 has 6 tokens cached, feeds its 7th (a decode)
    tables, starts = [[0, 1], [2, 3, 4]], [6, 0]
    rows = [decoding[-1:], prompt]
    from_packed = forward_packed(tiny, pool, rows, tables, starts)  # [2, V]
    padded = forward_padded(tiny, pool, rows, tables, starts)
    with torch.no_grad():
        alone = [tiny(torch.tensor([ids]))[0, -1] for ids in (decoding, prompt)]
    assert from_packed.shape == padded.shape == (2, tiny.config.vocab_size)
    for row in range(2):
        assert (from_packed[row] - alone[row]).abs().max() < TINY_ATOL
        assert (padded[row] - alone[row]).abs().max() < TINY_ATOL


def test_packed_layout_refuses_short_tables_and_wrong_widths(tiny):
    pool = BlockPool.for_model(tiny, n_blocks=4, block_size=4)
    with pytest.raises(ValueError, match="Allocate its blocks first"):
        PackedKV(pool, [[0]], [0], [5])
    with pytest.raises(ValueError, match="n_new >= 1"):
        PackedKV(pool, [[0], [1]], [0, 0], [2, 0])
    with pytest.raises(ValueError, match="packed into 3 tokens, got 4"):
        PackedKV(pool, [[0], [1]], [0, 0], [2, 1]).layout(4)
