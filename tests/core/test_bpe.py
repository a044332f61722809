"""Byte-pair encoding by hand (notebook 01): learning merges follows the textbook example, and SmolLM2's
own 48,900 merges, applied earliest first to its pre-tokenizer's words, give exactly its tokenizer's
pieces on English, code, numbers, accents, Japanese and emoji."""

import pytest

from labkit.core.bpe import apply_merges, byte_symbols, learn_merges, pre_tokenize, spell, tokenizer_merges

TEXTS = [
    "Unbelievably, tokenization works.",
    "def f(x):\n    return x ** 2  # squared",
    "The year 2024 had 366 days; 3.14159 is pi.",
    "Café naïve façade, Zürich ☀️",
    "東京は日本の首都です。",
    "   leading spaces and\ttabs\n\nnew lines",
]


def test_the_byte_table_covers_every_byte_once():
    table = byte_symbols()
    assert sorted(table) == list(range(256)) and len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("a")] == "a"


def test_learning_merges_the_most_frequent_pair_first():
    corpus = ["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3
    merges = learn_merges(corpus, 4)
    assert merges == [("e", "s"), ("es", "t"), ("l", "o"), ("lo", "w")]  # est: 9, lo and low: 7
    assert apply_merges("lowest", merges) == ["low", "est"]
    assert learn_merges(["ab"], 5) == [("a", "b")]  # stops once every word is one symbol


def test_smollm2s_own_merges_reproduce_its_tokenizer(tokenizer):
    merges = tokenizer_merges(tokenizer)
    assert len(merges) == 48_900 and merges[0] == ("Ġ", "t")
    for text in TEXTS:
        by_hand = [piece for word in pre_tokenize(tokenizer, text) for piece in apply_merges(word, merges)]
        assert by_hand == tokenizer.tokenize(text), text


def test_a_word_starts_from_its_bytes():
    assert spell("é") == ["Ã", "©"]
    assert apply_merges("é", []) == ["Ã", "©"]


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="n_merges"):
        learn_merges(["a"], -1)
