"""Copy on write by hand: a pure-Python block table small enough to print, for notebook 14's exercise.

When the engine serves n samples of one prompt (`add_request(prompt, n=4)`), the samples share the
prompt's blocks. A *full* shared block is never written again (positions only grow), but the last, partly
filled prompt block is: each sample's next token goes there. Writing it in place would put sample 1's
token into sample 2's text as well. So the first write into a shared block takes a fresh block, copies the
shared one's tokens into it, lets go of the shared one (its count - 1), and writes there: **copy on
write** (vLLM's parallel sampling; `labkit.serving.block_manager.BlockManager.append_slot`, whose copy
the engine makes in every layer's keys and values before the pass).

`BlockTables` holds only what the bookkeeping needs: each block's tokens (standing for its keys and
values), how many tables hold it, the free blocks, and each sequence's table.

    >>> pool = BlockTables.with_prompt("prompt", [1, 2, 3, 4, 5, 6], n_blocks=8, block_size=4)
    >>> pool.fork("prompt", "sample 1")
    >>> copy_on_write_append(pool, "sample 1", 7); copy_on_write_append(pool, "prompt", 8)
    >>> pool.tokens("sample 1"), pool.tokens("prompt"), pool.tables
    ([1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 8], {'prompt': [0, 1], 'sample 1': [0, 2]})
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from labkit.core.arguments import check_int, check_text
from labkit.core.doors import check_items


@dataclass
class BlockTables:
    """Blocks of `block_size` tokens, each sequence's table of them, and how many tables hold each."""

    block_size: int
    blocks: list[list[int]]  # the tokens in each block (in the engine: their keys and values, per layer)
    refs: list[int]  # how many tables hold each block
    free: list[int]  # blocks no table holds, the next one to hand out first
    tables: dict[str, list[int]] = field(default_factory=dict)  # sequence -> its blocks, in order

    def __post_init__(self):
        check_int("block_size", self.block_size, minimum=1)
        check_items("blocks", self.blocks, "blocks (each a list of token ids)", of=list)
        check_items("refs", self.refs, "reference counts (int), one per block", of=int)
        check_items("free", self.free, "free block numbers (int)", of=int)

    @classmethod
    def with_prompt(
        cls, name: str, prompt: Sequence[int], n_blocks: int = 8, block_size: int = 4
    ) -> BlockTables:
        """A pool of n_blocks empty blocks, with one sequence `name` holding `prompt`."""
        check_text("name", name, example="'a'")
        check_items("prompt", prompt, "token ids (int)", of=int)
        check_int("block_size", block_size, minimum=1)
        check_int("n_blocks", n_blocks, minimum=1)
        pool = cls(block_size, [[] for _ in range(n_blocks)], [0] * n_blocks, list(range(n_blocks)))
        pool.tables[name] = []
        for token in prompt:
            copy_on_write_append(pool, name, token)
        return pool

    def tokens(self, name: str) -> list[int]:
        """The sequence's tokens, read through its table."""
        return [token for block in self.tables[name] for token in self.blocks[block]]

    def take(self) -> int:
        """A free block, emptied, held once."""
        if not self.free:
            raise RuntimeError("No free block left: the pool is full.")
        block = self.free.pop(0)
        self.blocks[block], self.refs[block] = [], 1
        return block

    def release(self, block: int) -> None:
        """One table lets go of `block`; it is free once no table holds it."""
        self.refs[block] -= 1
        if self.refs[block] == 0:
            self.free.append(block)

    def fork(self, parent: str, child: str) -> None:
        """`child` shares every block of `parent` (each count + 1); nothing is copied."""
        if child in self.tables:
            raise ValueError(f"{child!r} already has a table.")
        self.tables[child] = list(self.tables[parent])
        for block in self.tables[child]:
            self.refs[block] += 1

    def problems(self) -> list[str]:
        """What is wrong with the bookkeeping ([] when nothing): counts that differ from the tables that hold
        each block, a held block also on the free list, a block that holds more than block_size tokens, or a
        block that is neither held nor free."""
        held = Counter(block for table in self.tables.values() for block in table)
        found = [
            f"block {b} is counted {self.refs[b]} times but {held[b]} table(s) hold it"
            for b in range(len(self.blocks))
            if self.refs[b] != held[b]
        ]
        found += [f"block {b} is held and free at once" for b in self.free if held[b]]
        found += [
            f"block {b} holds {len(tokens)} tokens, more than {self.block_size}"
            for b, tokens in enumerate(self.blocks)
            if len(tokens) > self.block_size
        ]
        found += [
            f"block {b} is neither held nor free (leaked)"
            for b in range(len(self.blocks))
            if not held[b] and b not in self.free
        ]
        return found


def copy_on_write_append(pool: BlockTables, name: str, token: int) -> None:
    """Append `token` to sequence `name`: a fresh block when the last one is full (or there is none); a
    private copy of the last block first when another table also holds it; then write the token."""
    table = pool.tables[name]
    if not table or len(pool.blocks[table[-1]]) == pool.block_size:
        table.append(pool.take())
    elif pool.refs[table[-1]] > 1:  # shared: copy it, let go of it, write into the copy
        shared, private = table[-1], pool.take()
        pool.blocks[private] = list(pool.blocks[shared])
        pool.release(shared)
        table[-1] = private
    pool.blocks[table[-1]].append(token)
