"""The hand-sized block table of notebook 14's copy-on-write exercise: forks share, the first write into a
shared block copies it, a full block stays shared, the last holder writes in place, and `problems` finds
what a wrong append breaks."""

import pytest

from labkit.compute.cow_exercise import BlockTables, copy_on_write_append


def forked() -> BlockTables:
    pool = BlockTables.with_prompt("prompt", [1, 2, 3, 4, 5, 6], n_blocks=8, block_size=4)
    pool.fork("prompt", "a")
    pool.fork("prompt", "b")
    return pool


def test_each_sample_writes_its_own_copy_of_the_shared_block():
    pool = forked()
    assert pool.tables == {"prompt": [0, 1], "a": [0, 1], "b": [0, 1]} and pool.refs[:2] == [3, 3]
    for name, token in (("a", 7), ("b", 8), ("prompt", 9)):
        copy_on_write_append(pool, name, token)
    assert [pool.tokens(n) for n in ("a", "b", "prompt")] == [[1, 2, 3, 4, 5, 6, t] for t in (7, 8, 9)]
    # in place; shared
    assert pool.tables["prompt"] == [0, 1] and pool.tables["a"][0] == pool.tables["b"][0] == 0
    assert pool.refs[0] == 3 and pool.problems() == []


def test_a_write_without_the_copy_shows_in_the_sibling_and_problems_name_the_bookkeeping():
    pool = forked()
    pool.blocks[pool.tables["a"][-1]].append(7)  # the bug: written into the shared block
    assert pool.tokens("b") == [1, 2, 3, 4, 5, 6, 7]
    pool.refs[1] += 1  # counted once too often
    pool.free.append(0)  # held and free
    assert pool.problems() == [
        "block 1 is counted 4 times but 3 table(s) hold it",
        "block 0 is held and free at once",
    ]


def test_a_full_pool_and_a_second_fork_are_refused():
    pool = BlockTables.with_prompt("p", [1, 2, 3, 4], n_blocks=1, block_size=4)
    with pytest.raises(RuntimeError, match="No free block"):
        copy_on_write_append(pool, "p", 5)
    pool.fork("p", "q")
    with pytest.raises(ValueError, match="already has a table"):
        pool.fork("p", "q")
