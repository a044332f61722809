"""The block manager's slots for speculative drafts (labkit.serving.speculation), and their rollback.

A decoding sequence that drafts k tokens feeds k + 1 at once: its pending token (whose slot
`append_slot` made) and the drafts, whose slots lie past its tokens. `reserve_drafts` gives it fresh
blocks for them, from the free blocks that name no prefix (the scheduler asks `draft_blocks` and
`draft_room` first and drops drafts that do not fit: a draft never preempts a request, nor evicts a
prefix the cache could still reuse); once the step has verified them, `release_past` gives back the
blocks past the tokens kept. Draft blocks are never named for the prefix cache (`publish` names only
cached tokens).

A Gemma3 has two pools, and a draft takes slots in both: its local layers' window table grows past the
sequence's tokens as the global table does, and rolls back the same way. Verification counts the kept tokens
one at a time (`advance`), so the local blocks that leave the window leave for the tokens kept, never for a
rejected draft's; the window's end then comes back to the blocks kept (invariant 6 of block_manager).

    >>> manager.reserve_drafts(seq, 4)      # seq.block_table covers len(seq) + 4 tokens (window_table too)
    >>> manager.release_past(seq)           # after verification: ceil(len(seq) / block_size) blocks again
"""

from __future__ import annotations

import math

from labkit.serving.named_blocks import NamedBlocks
from labkit.serving.request import EngineRequest


class DraftSlots:
    """BlockManager's draft-slot methods."""

    full: NamedBlocks  # the (global layers') pool
    window: NamedBlocks | None  # a Gemma3's local layers' pool
    window_end: dict[int, int]  # request_id -> tokens its window table has room for
    block_size: int

    def draft_blocks(self, seq: EngineRequest, n: int) -> tuple[int, int]:
        """Fresh blocks the slots of n draft tokens after seq's next one need: (global, local; 0 without a
        window)."""
        end = math.ceil((len(seq) + n) / self.block_size)
        local = 0 if self.window is None else max(0, end - len(seq.window_table))
        return max(0, end - len(seq.block_table)), local

    def draft_room(self) -> tuple[int, int]:
        """Free blocks a draft may take, (global, local): those that name no prefix (taking one evicts
        nothing)."""
        local = 0 if self.window is None else self.window.allocator.n_free - self.window.n_cached_free
        return self.full.allocator.n_free - self.full.n_cached_free, local

    def reserve_drafts(self, seq: EngineRequest, n: int) -> None:
        """Fresh blocks for n draft tokens after seq's next one (its slot already there: append_slot), in
        each pool, none of them a free block that names a prefix; `release_past` gives back those past the
        tokens kept. Never named: a draft is not a prefix."""
        needed, room = self.draft_blocks(seq, n), self.draft_room()
        if not fits(needed, room):
            raise ValueError(
                f"{seq} needs {needed} blocks for {n} drafts, {room} are free; ask draft_room first."
            )
        seq.block_table += [self.full.fresh_unnamed() for _ in range(needed[0])]
        if self.window is not None:
            seq.window_table += [self.window.fresh_unnamed() for _ in range(needed[1])]
            self.window_end[seq.request_id] = len(seq) + n

    def release_past(self, seq: EngineRequest) -> None:
        """Release seq's blocks past its tokens (a rejected draft's), last first, in each pool: a rollback."""
        keep = math.ceil(len(seq) / self.block_size)
        self.full.release(seq.block_table[keep:])
        del seq.block_table[keep:]
        if self.window is not None:
            self.window.release(seq.window_table[keep:])
            del seq.window_table[keep:]
            # the window table's end: its kept blocks' room, never past the pending token
            self.window_end[seq.request_id] = min(len(seq), len(seq.window_table) * self.block_size)


def fits(needed: tuple[int, int], room: tuple[int, int]) -> bool:
    """Whether blocks `needed` (global, local) fit in `room` (global, local).

    >>> fits((1, 0), (2, 0)), fits((1, 1), (2, 0))
    (True, False)
    """
    return needed[0] <= room[0] and needed[1] <= room[1]
