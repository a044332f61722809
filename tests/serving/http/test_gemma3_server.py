"""`python -m labkit serve --model gemma3-270m`: the real server runs labkit's Gemma3 in its engine. Through
the official clients, greedy completions (one of them past the 512-token window) equal `labkit.generate`
alone while they share the engine's steps; /api/show names the architecture and its window; a chat request
to this base model, which has no chat template, is a 400 in OpenAI's error shape, and the server keeps
serving."""

from concurrent.futures import ThreadPoolExecutor

import ollama
import openai
import pytest

import labkit
from labkit.models.long_text import long_text
from labkit.serving.http import start_server

MODEL = "gemma3-270m"
NEW_TOKENS = 8

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server():
    with start_server(MODEL, max_num_seqs=4, chunked_prefill=True) as handle:
        yield handle


@pytest.fixture(scope="module")
def gemma():
    return labkit.load_model(MODEL, impl="labkit")


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def test_greedy_completions_side_by_side_equal_generate_alone(server, client, gemma):
    model, tokenizer = gemma
    past_window = tokenizer.decode(tokenizer(long_text()[:6000]).input_ids[1:540])
    prompts = [past_window, "The capital of France is", "def add(a, b):\n"]

    def complete(prompt):
        answer = client.completions.create(model=MODEL, prompt=prompt, max_tokens=NEW_TOKENS, temperature=0)
        return answer.choices[0].text

    with ThreadPoolExecutor(len(prompts)) as pool:
        served = list(pool.map(complete, prompts))
    alone = [labkit.generate_text(model, tokenizer, p, max_new_tokens=NEW_TOKENS) for p in prompts]
    assert served == alone
    assert len(tokenizer(prompts[0]).input_ids) > model.config.sliding_window


def test_show_names_gemma3_and_its_window_and_chat_is_refused_in_openais_shape(server, client):
    shown = ollama.Client(host=server.url, timeout=60).show(MODEL)
    assert shown.details.family == "gemma3"
    assert shown.modelinfo["gemma3.attention.sliding_window"] == 512
    assert shown.modelinfo["gemma3.block_count"] == 18
    with pytest.raises(openai.BadRequestError, match="chat template"):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
    again = client.completions.create(model=MODEL, prompt="One, two,", max_tokens=2, temperature=0)
    assert again.choices[0].finish_reason == "length"
