"""Fixtures of the quantization tests."""

import pytest

import labkit


@pytest.fixture
def fresh_tiny_hf():
    """A new transformers tiny model (the weights of the `tiny_hf` fixture) for each test: quantize_model
    swaps its layers in place, so no two tests may share one."""
    return labkit.tiny_model("transformers", seed=0)
