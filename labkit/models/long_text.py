"""A long English text that needs no download, for reading past a model's context (notebook 15).

The source is Python's own documentation: the standard library's `pydoc_data.topics.topics`, the topic
pages `help()` shows ("assert", "class", "for", ...), joined in sorted key order with a blank line between
them. On Python 3.11.7 that is 79 topics, 465,126 characters and 113,108 SmolLM2 tokens (measured with
SmolLM2's tokenizer): well past SmolLM2's trained 8,192. Another Python version ships slightly different
topics, so the exact text (and count) follows the interpreter.

    >>> long_text_ids(tokenizer, 4096).shape
    torch.Size([1, 4096])
"""

from __future__ import annotations

from pydoc_data.topics import topics

import torch

from labkit.core.arguments import check_int
from labkit.core.doors import check_tokenizer


def long_text() -> str:
    """Python's documentation topics (`pydoc_data.topics.topics`), in sorted key order, separated by blank
    lines: 465,126 characters on Python 3.11.7.

        >>> long_text()[:22]
        'The "assert" statement'
    """
    return "\n\n".join(topics[key] for key in sorted(topics))


def long_text_ids(tokenizer, n_tokens: int) -> torch.Tensor:
    """The first n_tokens token ids of `long_text()` [1, n_tokens] (long); a ValueError when the text has
    fewer (113,108 with SmolLM2's tokenizer on Python 3.11.7).

        >>> long_text_ids(tokenizer, 20000).shape
        torch.Size([1, 20000])
    """
    check_tokenizer("tokenizer", tokenizer)
    check_int("n_tokens", n_tokens, minimum=1)
    ids = tokenizer(long_text())["input_ids"]
    if len(ids) < n_tokens:
        raise ValueError(
            f"long_text() has {len(ids):,} tokens with this tokenizer; n_tokens={n_tokens:,} asks for more. "
            f"Ask for at most {len(ids):,}."
        )
    return torch.tensor([ids[:n_tokens]])
