"""Prompt lookup kept as an index: the serving engine's drafter for one request (labkit.serving.speculation).

`PromptLookupDrafter.propose` scans the whole context backwards for the last n tokens, every step: with
no match (free text) that is a scan of every earlier position for each n (measured: 56 us a row a step at
300 tokens, growing with the context), paid whether a draft comes out or not. A request's tokens
only grow, so the engine keeps, per request, the most recent start of every n-gram that has a token after
it, and adds the n-grams each new token completes: a proposal is then one dictionary lookup per n.

It proposes exactly what `PromptLookupDrafter(max_ngram, min_ngram).propose` does (the most recent earlier
occurrence of the longest matching suffix, never the suffix itself):

    >>> index = NgramIndex(min_ngram=1, max_ngram=2)
    >>> index.propose([5, 6, 7, 8, 5, 6], 3)
    [7, 8, 5]
    >>> index.propose([5, 6, 7, 8, 5, 6, 7], 3)    # one more token: only the new n-grams are indexed
    [8, 5, 6]
"""

from __future__ import annotations

from collections.abc import Sequence

from labkit.core.arguments import check_int


class NgramIndex:
    """The most recent start of each n-gram (min_ngram to max_ngram tokens) of one growing token list that
    a token follows; rebuilt from scratch if the list it is given is not the one it indexed, extended."""

    def __init__(self, min_ngram: int = 1, max_ngram: int = 3):
        check_int("min_ngram", min_ngram, minimum=1, note="tokens looked up")
        check_int("max_ngram", max_ngram, minimum=1, note="tokens looked up")
        if min_ngram > max_ngram:
            raise ValueError(f"min_ngram ({min_ngram}) must be at most max_ngram ({max_ngram}).")
        self.min_ngram, self.max_ngram = min_ngram, max_ngram
        self.starts: dict[tuple[int, ...], int] = {}  # n-gram -> its latest start with a token after it
        self.indexed: list[int] = []  # the tokens indexed so far (a copy)

    def update(self, ids: Sequence[int]) -> None:
        """Index the n-grams that the tokens after the ones already indexed complete (all of them when ids
        does not extend what was indexed)."""
        seen = len(self.indexed)
        if list(ids[:seen]) != self.indexed:  # not the list it indexed, grown (one C-level compare)
            self.starts.clear()
            self.indexed, seen = [], 0
        self.indexed.extend(ids[seen:])
        tokens = self.indexed
        for follower in range(max(seen, 1), len(tokens)):  # the n-grams ending just before it now have one
            for n in range(self.min_ngram, min(self.max_ngram, follower) + 1):
                self.starts[tuple(tokens[follower - n : follower])] = follower - n

    def propose(self, ids: Sequence[int], gamma: int) -> list[int]:
        """Up to gamma tokens that followed the most recent earlier occurrence of ids' last n tokens, for
        the longest n that has one (max_ngram down to min_ngram); [] when none has."""
        self.update(ids)
        tokens = self.indexed
        for n in range(min(self.max_ngram, len(tokens) - 1), self.min_ngram - 1, -1):
            start = self.starts.get(tuple(tokens[-n:]))
            if start is not None:
                return tokens[start + n : start + n + gamma]
        return []
