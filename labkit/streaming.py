"""Turning a stream of token ids into a stream of text pieces.

Two problems: one character may span several tokens (an emoji is 4 bytes, often 2-4 byte-level
tokens), and a stop string may span several tokens and must not be shown. `TextStream` solves the
first by re-decoding a short window of ids and emitting only finished characters; `StopMatcher` the
second by holding back text that could still become a stop string.

    >>> stream = TextStream(tokenizer, prompt_ids)
    >>> pieces = [stream.push(token_id) for token_id in new_ids]
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

INCOMPLETE_CHARACTER = "\ufffd"  # what a tokenizer decodes half of a multi-byte character to
PROMPT_CONTEXT_TOKENS = 4  # prompt tokens decoded along with the first new ones, so spacing is right


class TextStream:
    """Incremental detokenizer: push(token_id) returns the new, complete text ('' if none yet)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompt_ids: Sequence[int] = ()):
        self.tokenizer = tokenizer
        self.ids = list(prompt_ids)[-PROMPT_CONTEXT_TOKENS:]
        self.prefix_offset = 0  # start of the window that is re-decoded for context
        self.read_offset = len(self.ids)  # ids before this are already emitted as text

    def push(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        already = self._decode(self.ids[self.prefix_offset:self.read_offset])
        with_new = self._decode(self.ids[self.prefix_offset:])
        if len(with_new) <= len(already) or with_new.endswith(INCOMPLETE_CHARACTER):
            return ""  # a character is still incomplete: wait for its next bytes
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return with_new[len(already):]

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)


class StopMatcher:
    """Finds stop strings across text pieces; the stop string itself is never emitted."""

    def __init__(self, stop: Sequence[str]):
        self.stop = list(stop)
        self.pending = ""  # text held back because it could be the start of a stop string
        self.stopped = False

    def push(self, piece: str) -> str:
        """Add a piece of text; return what is safe to show now. Sets `stopped` on a match."""
        self.pending += piece
        hits = [i for i in (self.pending.find(s) for s in self.stop) if i >= 0]
        if hits:
            self.stopped = True
            shown, self.pending = self.pending[:min(hits)], ""
            return shown
        hold = self._longest_stop_prefix_suffix()
        shown = self.pending[:len(self.pending) - hold]
        self.pending = self.pending[len(self.pending) - hold:]
        return shown

    def flush(self) -> str:
        """At the end of generation, release held-back text (it never became a stop string)."""
        shown, self.pending = self.pending, ""
        return shown

    def _longest_stop_prefix_suffix(self) -> int:
        """Length of the longest end of `pending` that is the beginning of some stop string."""
        for size in range(min(len(self.pending), max(map(len, self.stop), default=1) - 1), 0, -1):
            tail = self.pending[-size:]
            if any(s.startswith(tail) for s in self.stop):
                return size
        return 0
