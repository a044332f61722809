"""Byte-pair encoding by hand (notebook 01): how a tokenizer's vocabulary is learned, and how its merges
cut a word.

**Learning** (Sennrich et al. 2016; GPT-2 runs it on bytes): write every word of a corpus as single
symbols, count every pair of neighbours over the corpus, merge the most frequent pair into one new
symbol everywhere, and repeat. The ordered list of merges is what the tokenizer learned; its vocabulary
is the single bytes plus one symbol per merge.

**Encoding** a word with a learned list: start from its single bytes and apply, again and again, the
merge learned *earliest* among the pairs present, until no pair of neighbours is a merge. SmolLM2's
tokenizer does exactly this with its 48,900 merges, after cutting text into words (its pre-tokenizer:
a space belongs to the word after it, and is written `Ġ`).

Byte-level symbols: a byte-level BPE works on the UTF-8 bytes of the text, each written as one printable
character (GPT-2's table: printable bytes stand for themselves, the others, the space first, are moved
to characters from 256 on, so a space is `Ġ`), so that every text, emoji included, has a spelling.

    >>> merges = learn_merges(["low", "low", "lower", "newest", "newest", "widest"], 3)
    >>> merges
    [('e', 's'), ('es', 't'), ('l', 'o')]
    >>> apply_merges("lowest", merges)
    ['lo', 'w', 'est']
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import cache

from labkit.core.arguments import check_int
from labkit.core.doors import check_items, check_record

Merge = tuple[str, str]


@cache
def byte_symbols() -> dict[int, str]:
    """GPT-2's table: the printable character that stands for each of the 256 byte values.

    >>> byte_symbols()[ord(" ")], byte_symbols()[ord("a")]
    ('Ġ', 'a')
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table, moved = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + moved)
            moved += 1
    return table


def spell(word: str) -> list[str]:
    """A word's UTF-8 bytes, each as its byte-level symbol.

    >>> spell(" hé")
    ['Ġ', 'h', 'Ã', '©']
    """
    return [byte_symbols()[byte] for byte in word.encode("utf-8")]


def merge_pair(symbols: Sequence[str], pair: Merge) -> list[str]:
    """`symbols` with every neighbouring occurrence of `pair`, left to right, joined into one symbol."""
    merged, index = [], 0
    while index < len(symbols):
        if index + 1 < len(symbols) and (symbols[index], symbols[index + 1]) == pair:
            merged.append(pair[0] + pair[1])
            index += 2
        else:
            merged.append(symbols[index])
            index += 1
    return merged


def learn_merges(words: Iterable[str], n_merges: int) -> list[Merge]:
    """The first `n_merges` merges BPE learns from a corpus given as its words (repeats count). A tie
    between pairs goes to the pair that sorts first, so the result does not depend on dict order.

    >>> learn_merges(["aaab", "aab"], 2)  # then ('aa', 'a'), ('a', 'b') and ('aa', 'b') tie at 1
    [('a', 'a'), ('a', 'b')]
    """
    check_int("n_merges", n_merges, minimum=0)
    words = check_items("words", words, "words of a corpus (str), repeats included", of=str)
    corpus = Counter(tuple(spell(word)) for word in words)
    merges: list[Merge] = []
    while len(merges) < n_merges:
        pairs = Counter()
        for symbols, count in corpus.items():
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += count
        if not pairs:
            break  # every word is one symbol: nothing is left to merge
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))
        merges.append(best)
        corpus = Counter({tuple(merge_pair(symbols, best)): count for symbols, count in corpus.items()})
    return merges


def apply_merges(word: str, merges: Sequence[Merge]) -> list[str]:
    """Encode one word (as the pre-tokenizer cut it, its leading space included) with learned merges:
    from its bytes, apply the earliest-learned merge among its neighbouring pairs until none applies.

    >>> apply_merges(" the", [("Ġ", "t"), ("h", "e"), ("Ġt", "he")])
    ['Ġthe']
    """
    check_record("word", word, "one word (str), as the pre-tokenizer cut it", of=str)
    merges = check_items("merges", merges, "merges, (left, right) pairs of symbols (learn_merges)", of=tuple)
    rank = {pair: number for number, pair in enumerate(merges)}
    symbols = spell(word)
    while len(symbols) > 1:
        ranked = [rank[pair] for pair in zip(symbols, symbols[1:]) if pair in rank]
        if not ranked:
            break
        symbols = merge_pair(symbols, merges[min(ranked)])
    return symbols


def check_byte_level(tokenizer: object) -> None:
    """A TypeError unless `tokenizer` is a Hugging Face fast tokenizer (it has a backend_tokenizer)."""
    check_record(
        "tokenizer",
        tokenizer,
        "a Hugging Face fast tokenizer (labkit.load_tokenizer)",
        has=("backend_tokenizer",),
    )


def pre_tokenize(tokenizer, text: str) -> list[str]:
    """The words a Hugging Face byte-level tokenizer cuts `text` into before its merges run, as text (a
    space belongs to the word after it).

    >>> pre_tokenize(smol_tok, "Hello world!")
    ['Hello', ' world', '!']
    """
    check_record("text", text, "the text to cut into words (str)", of=str)
    check_byte_level(tokenizer)
    byte_of = {symbol: byte for byte, symbol in byte_symbols().items()}
    pieces = tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)
    return [
        bytes(byte_of[symbol] for symbol in piece).decode("utf-8", errors="replace") for piece, _ in pieces
    ]


def tokenizer_merges(tokenizer) -> list[Merge]:
    """The ordered merges of a Hugging Face byte-level BPE tokenizer (SmolLM2's: 48,900).

    >>> tokenizer_merges(smol_tok)[:3]
    [('Ġ', 't'), ('Ġ', 'a'), ('i', 'n')]
    """
    check_byte_level(tokenizer)
    model = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"tokenizer must be a BPE tokenizer (SmolLM2's), not a {model.get('type')} one.")
    return [
        tuple(merge.split(" ", 1)) if isinstance(merge, str) else tuple(merge) for merge in model["merges"]
    ]
