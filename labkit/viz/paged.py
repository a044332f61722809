"""The paged KV cache drawn: block tables pointing into the pool (notebook 06), as a figure or as text.

>>> draw_block_tables({"A": cache_a, "B": cache_b})
>>> print(format_block_tables({"A": cache_a, "B": cache_b}))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from labkit.core.doors import check_table
from labkit.core.paged import PagedKVCache
from labkit.viz.alt import with_alt_text


def format_block_tables(caches: Mapping[str, PagedKVCache]) -> str:
    """The block tables and the pool as text (the static picture of `draw_block_tables`).

    >>> print(format_block_tables({"A": a, "B": b}))
    A  length 37  blocks [0, 1, 2]
    B  length 38  blocks [0, 1, 3]
    pool: 8 blocks of 16 tokens; used 0:x2 1:x2 2 3; free 4
    """
    check_table("caches", caches, "PagedKVCache (labkit.core.paged)", has=("pool", "block_tables", "length"))
    if not caches:
        raise ValueError("Give at least one paged cache, e.g. {'A': cache_a}.")
    pool = next(iter(caches.values())).pool
    width = max(len(name) for name in caches)
    lines = []
    for name, cache in caches.items():
        tables = " ".join(str(table) for table in cache.block_tables)
        lines.append(f"{name:<{width}}  length {cache.length:>3}  blocks {tables}")
    counts = pool.allocator.ref_counts
    used = " ".join(f"{b}:x{c}" if c > 1 else str(b) for b, c in enumerate(counts) if c > 0)
    lines.append(
        f"pool: {pool.n_blocks} blocks of {pool.block_size} tokens; used {used or '-'}; "
        f"free {pool.allocator.n_free}"
    )
    return "\n".join(lines)


POOL_Y, TABLE_Y = 0.0, 2.2  # heights of the pool's row and of the block tables' row
FREE_COLOR, OWN_COLOR, SHARED_COLOR = "#f4f4f4", "#9ec5fe", "#ffb36b"  # a block held by 0, 1 or more tables


def block_colour(count: int) -> str:
    """The colour of a block its tables hold `count` times: grey when free, blue when one sequence's,
    orange when shared.

        >>> block_colour(2)
        '#ffb36b'
    """
    return FREE_COLOR if count == 0 else (SHARED_COLOR if count > 1 else OWN_COLOR)


def add_pool(ax, counts: Sequence[int]) -> None:
    """The pool's blocks along the bottom row (`counts`: each block's reference count), each with its number,
    a shared one also with its count (x2), and the two rows' names on the left."""
    for block, count in enumerate(counts):
        ax.add_patch(
            Rectangle((block, POOL_Y), 0.9, 0.8, facecolor=block_colour(count), edgecolor="black", lw=0.8)
        )
        label = str(block) if count <= 1 else f"{block}\nx{count}"
        ax.text(block + 0.45, POOL_Y + 0.4, label, ha="center", va="center", fontsize=8)
    ax.text(-0.2, POOL_Y + 0.4, "pool", ha="right", va="center", fontsize=9, fontweight="bold")
    ax.text(-0.2, TABLE_Y + 0.4, "block\ntables", ha="right", va="center", fontsize=9, fontweight="bold")


def add_block_table(
    ax, offset: float, name: str, table: Sequence[int], length: int, counts: Sequence[int], block_size: int
) -> None:
    """One sequence's block table from x = offset in the top row: a box per block with its number, how many
    of its slots are filled ("16/16"), and an arrow down to that block in the pool."""
    ax.text(offset, TABLE_Y + 1.25, f"{name}: {length} tokens", ha="left", va="bottom", fontsize=9)
    for i, block in enumerate(table):
        left = offset + i
        ax.add_patch(
            Rectangle(
                (left, TABLE_Y), 0.9, 0.8, facecolor=block_colour(counts[block]), edgecolor="black", lw=0.8
            )
        )
        filled = min(block_size, length - i * block_size)
        ax.text(left + 0.45, TABLE_Y + 0.4, f"{block}", ha="center", va="center", fontsize=8)
        ax.text(
            left + 0.45,
            TABLE_Y + 0.85,
            f"{filled}/{block_size}",
            ha="center",
            va="bottom",
            fontsize=6,
            color="dimgray",
        )
        ax.annotate(
            "",
            xy=(block + 0.45, POOL_Y + 0.82),
            xytext=(left + 0.45, TABLE_Y - 0.02),
            arrowprops={"arrowstyle": "->", "color": "gray", "lw": 0.7, "alpha": 0.8},
        )


@with_alt_text("Diagram of paged KV cache block tables: each sequence's blocks pointing into the shared pool")
def draw_block_tables(caches: Mapping[str, PagedKVCache], ax=None):
    """Each sequence's block table (top rows) pointing into the pool's blocks (bottom row).

    Blocks shared by two or more tables are orange, with their reference count; free blocks are grey.
    Returns the matplotlib Axes.
    """
    check_table("caches", caches, "PagedKVCache (labkit.core.paged)", has=("pool", "block_tables", "length"))
    if not caches:
        raise ValueError("Give at least one paged cache, e.g. {'A': cache_a}.")
    pool = next(iter(caches.values())).pool
    counts = pool.allocator.ref_counts
    rows = [
        (f"{name}[{r}]" if cache.batch_size > 1 else name, table, cache.length)
        for name, cache in caches.items()
        for r, table in enumerate(cache.block_tables)
    ]
    # The tables side by side on top (so no arrow crosses another table), the pool underneath.
    offsets, x = [], 0.0
    for name, table, _ in rows:
        offsets.append(x)
        x += max(len(table), 2) + 1.0
    width = max(pool.n_blocks, x - 1.0)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5.0, 0.6 * width + 1.5), 2.8), layout="constrained")
    add_pool(ax, counts)
    for offset, (name, table, length) in zip(offsets, rows):
        add_block_table(ax, offset, name, table, length, counts, pool.block_size)
    ax.set_xlim(-1.6, width + 0.2)
    ax.set_ylim(-0.2, TABLE_Y + 1.7)
    ax.set_axis_off()
    ax.set_title(
        f"{pool.block_size} tokens per block; orange = shared, blue = one sequence's, grey = free", fontsize=9
    )
    return ax
