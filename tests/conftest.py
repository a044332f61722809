"""Shared fixtures: the real embedded models are loaded once per test session."""

import pytest

import labkit


@pytest.fixture(scope="session")
def smollm2():
    """(transformers model, tokenizer) of SmolLM2-135M-Instruct, float32 on the CPU."""
    return labkit.load_model("smollm2-135m")


@pytest.fixture(scope="session")
def smollm2_labkit(smollm2):
    """labkit's from-scratch Llama on the same weights as the `smollm2` fixture."""
    return labkit.Llama.from_hf(smollm2[0])


@pytest.fixture(scope="session")
def tokenizer(smollm2):
    return smollm2[1]


@pytest.fixture(scope="session")
def gemma3():
    return labkit.load_model("gemma3-270m")
