"""Shared fixtures: the real embedded models are loaded once per test session."""

import pytest
import torch

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


@pytest.fixture
def one_thread():
    """One torch thread for the test: tiny-model tests run thousands of millisecond-sized ops, and on a
    busy 2-core machine handing each one between threads costs more than the op itself."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
