"""The engine's prompt lookup as an index (labkit.speculative.ngram_index): the same drafts as notebook 09's
PromptLookupDrafter on growing token lists, rebuilt when given another list, and clear errors."""

import random

import pytest

from labkit.speculative.drafters import PromptLookupDrafter
from labkit.speculative.ngram_index import NgramIndex


def test_it_proposes_what_the_scan_proposes_as_the_tokens_grow():
    """Property-style: 200 random growing lists (fixed seed), small vocabularies so that n-grams repeat."""
    rng = random.Random(0)
    for _ in range(200):
        vocab, low = rng.choice([2, 3, 5, 20, 1000]), rng.randint(1, 3)
        high = rng.randint(low, 4)
        ids = [rng.randrange(vocab) for _ in range(rng.randint(1, 10))]
        index, scan = NgramIndex(low, high), PromptLookupDrafter(high, low)
        for _ in range(40):
            gamma = rng.randint(1, 5)
            assert index.propose(ids, gamma) == scan.propose(ids, gamma)[0], (ids, low, high, gamma)
            ids = ids + [rng.randrange(vocab) for _ in range(rng.randint(1, 3))]


def test_another_list_is_indexed_afresh():
    index = NgramIndex(1, 2)
    assert index.propose([5, 6, 7, 8, 5, 6], 3) == [7, 8, 5]
    assert index.propose([1, 2, 3, 1], 2) == [2, 3]  # shorter: not the same list grown
    assert index.propose([9, 9, 9, 4, 5], 2) == []  # longer, another start: nothing of [1, 2, 3, 1] kept
    assert index.indexed == [9, 9, 9, 4, 5]
    # another list whose token at the last indexed place is the same: indexed afresh all the same
    assert index.propose([7, 9, 9, 4, 5, 9], 2) == PromptLookupDrafter(2, 1).propose([7, 9, 9, 4, 5, 9], 2)[0]
    assert index.indexed == [7, 9, 9, 4, 5, 9]  # not [9, 9, 9, 4, 5] extended by one


def test_bad_sizes_are_refused_by_name():
    with pytest.raises(ValueError, match="min_ngram must be a whole number of 1 or more"):
        NgramIndex(0, 3)
    with pytest.raises(ValueError, match=r"min_ngram \(3\) must be at most max_ngram \(2\)"):
        NgramIndex(3, 2)
