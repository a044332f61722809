"""The block manager's slots for speculative drafts (labkit.serving.speculation), and their rollback.

A decoding sequence that drafts k tokens feeds k + 1 at once: its pending token (whose slot
`append_slot` made) and the drafts, whose slots lie past its tokens. `reserve_drafts` gives it fresh
blocks for them, from the free blocks that name no prefix (the scheduler asks `draft_blocks` and
`draft_room` first and drops drafts that do not fit: a draft never preempts a request, nor evicts a
prefix the cache could still reuse); once the step has verified them, `release_past` gives back the
blocks past the tokens kept. Draft blocks are never named for the prefix cache (`publish` names only
cached tokens).
A Llama's pool only: a Gemma3's local layers release blocks as its window moves, which a rollback would undo.

    >>> manager.reserve_drafts(seq, 4)      # seq.block_table covers len(seq) + 4 tokens
    >>> manager.release_past(seq)           # after verification: ceil(len(seq) / block_size) blocks again
"""

from __future__ import annotations

import math

from labkit.serving.named_blocks import NamedBlocks
from labkit.serving.request import EngineRequest


class DraftSlots:
    """BlockManager's draft-slot methods."""

    full: NamedBlocks  # the (global layers') pool
    window: NamedBlocks | None  # a Gemma3's local layers' pool: no drafts there
    block_size: int

    def draft_blocks(self, seq: EngineRequest, n: int) -> int:
        """Fresh blocks the slots of n draft tokens after seq's next one need (a Llama's pool only)."""
        if self.window is not None:
            raise ValueError("Draft slots are a Llama's: a sliding-window pool cannot drop rejected drafts.")
        return max(0, math.ceil((len(seq) + n) / self.block_size) - len(seq.block_table))

    def draft_room(self) -> int:
        """Free blocks a draft may take: those that name no prefix (taking one evicts nothing)."""
        return self.full.allocator.n_free - self.full.n_cached_free

    def reserve_drafts(self, seq: EngineRequest, n: int) -> None:
        """Fresh blocks for n draft tokens after seq's next one (its slot already there: append_slot), none
        of them a free block that names a prefix; `release_past` gives back those past the tokens kept.
        Never named: a draft is not a prefix."""
        needed = self.draft_blocks(seq, n)
        if needed > self.draft_room():
            raise ValueError(f"{seq} needs {needed} blocks for {n} drafts; ask draft_room first.")
        seq.block_table += [self.full.fresh_unnamed() for _ in range(needed)]

    def release_past(self, seq: EngineRequest) -> None:
        """Release seq's blocks past its tokens (a rejected draft's), last first: a rollback."""
        keep = math.ceil(len(seq) / self.block_size)
        self.full.release(seq.block_table[keep:])
        del seq.block_table[keep:]
