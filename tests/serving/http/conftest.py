"""The server a module of these tests talks to, and the official clients pointed at it.

A module that uses the `server` fixture below names its options in SERVER_OPTIONS (start_server's keyword
arguments; default: 4 seats); a module with a server of its own defines its own `server` fixture."""

import ollama
import openai
import pytest

from labkit.serving.http import start_server

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def server(request):
    """One real labkit server process (SmolLM2-135M-Instruct) on 127.0.0.1 for the module."""
    options = getattr(request.module, "SERVER_OPTIONS", {"max_num_seqs": 4})
    with start_server(MODEL, **options) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server):
    """The unmodified openai client, no retries (a retried error would hide the first answer)."""
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def ollama_client(server):
    return ollama.Client(host=server.url, timeout=120)
