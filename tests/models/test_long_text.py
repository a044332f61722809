"""The long text ships with Python: it reads the same every time and is long enough for notebook 15."""

import pytest
import torch

from labkit.models.long_text import long_text, long_text_ids


def test_the_text_is_pythons_documentation_topics():
    text = long_text()
    assert text.startswith('The "assert" statement') and len(text) > 400_000
    assert long_text() == text


def test_ids_are_the_texts_first_tokens(tokenizer):
    ids = long_text_ids(tokenizer, 20_000)  # notebook 15 reads 20,000 tokens, past SmolLM2's 8,192
    assert ids.shape == (1, 20_000) and ids.dtype == torch.long
    assert torch.equal(long_text_ids(tokenizer, 50)[0], ids[0, :50])
    assert tokenizer.decode(ids[0, :5]).startswith('The "assert"')


def test_asking_for_more_than_the_text_says_how_many_it_has(tokenizer):
    with pytest.raises(ValueError, match=r"long_text\(\) has [\d,]+ tokens with this tokenizer"):
        long_text_ids(tokenizer, 10_000_000)
