"""labkit's server driven by the official, unmodified `ollama` client: list, show, ps, generate and chat,
streaming and not; greedy answers equal `labkit.generate` on the same prompt; `format` (a JSON schema or
"json") gives answers that parse and fit; concurrent clients; every
bad input answered 400/404/413 in Ollama's shape, and the server still answering afterwards.

One real server process (SmolLM2-135M-Instruct, labkit's Llama) on 127.0.0.1 serves the whole module, with
chunked prefill under a budget smaller than a chat prompt, so every answer above is also checked against
`labkit.generate` with its prompt fed in chunks beside other requests' decodes."""

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import ollama
import pytest

import labkit

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"
NEW_TOKENS = 8
GREEDY = {"temperature": 0, "num_predict": NEW_TOKENS}
CHUNK_BUDGET = 16  # tokens a step: a chat prompt (about 35 tokens with the system prompt) takes 2-3 steps
QUESTIONS = ["Name three primary colors.", "Why is the sky blue?", "How do birds fly?"]
COLORS = {
    "type": "object",
    "properties": {
        "colors": {"type": "array", "maxItems": 3, "items": {"enum": ["red", "yellow", "blue", "green"]}}
    },
    "required": ["colors"],
    "additionalProperties": False,
}
# the module's server (conftest.py): chunked prefill under a budget smaller than a chat prompt
SERVER_OPTIONS = {"max_num_seqs": 4, "chunked_prefill": True, "max_num_batched_tokens": CHUNK_BUDGET}


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.url)


@pytest.fixture(scope="module")
def reference(smollm2_labkit, tokenizer):
    """labkit.generate's greedy text for a question (chat template) or a raw text; each computed once."""
    cache = {}

    def text(question: str, raw: bool = False) -> str:
        if (question, raw) not in cache:
            ids = (
                labkit.encode_prompt(tokenizer, question)
                if raw
                else labkit.chat_prompt(tokenizer, [{"role": "user", "content": question}])
            )
            steps = labkit.generate(smollm2_labkit, tokenizer, ids, max_new_tokens=NEW_TOKENS)
            cache[question, raw] = "".join(step.text for step in steps)
        return cache[question, raw]

    return text


def test_list_show_and_ps_describe_the_model(client):
    names = [m.model for m in client.list().models]
    assert names == [f"{MODEL}:latest"]
    shown = client.show(MODEL)
    assert shown.modelinfo["llama.context_length"] == 8192
    assert shown.modelinfo["llama.block_count"] == 30
    assert "<|im_start|>" in shown.template
    assert [m.model for m in client.ps().models] == [f"{MODEL}:latest"]


def test_the_server_says_it_feeds_prompts_in_chunks(server):
    assert f"chunked prefill ({CHUNK_BUDGET} tokens a step)" in server.log.read_text()


def test_root_and_version_answer_like_ollama(server):
    assert httpx.get(server.url + "/").text == "Ollama is running"
    assert httpx.get(server.url + "/api/version").json()["version"]


def test_chat_greedy_equals_labkit_generate(client, reference, tokenizer):
    messages = [{"role": "user", "content": QUESTIONS[0]}]
    answer = client.chat(model=MODEL, messages=messages, stream=False, options=GREEDY)
    assert answer.message.role == "assistant"
    assert answer.message.content == reference(QUESTIONS[0])
    assert answer.done and answer.done_reason in ("stop", "length")
    assert answer.prompt_eval_count == len(labkit.chat_prompt(tokenizer, messages))


def test_chat_stream_is_the_same_text_with_a_final_chunk_of_stats(client):
    messages = [{"role": "user", "content": QUESTIONS[1]}]
    whole = client.chat(model=f"{MODEL}:latest", messages=messages, stream=False, options=GREEDY)
    chunks = list(client.chat(model=f"{MODEL}:latest", messages=messages, stream=True, options=GREEDY))
    assert len(chunks) > 2 and all(not c.done for c in chunks[:-1])
    final = chunks[-1]
    assert final.done and final.done_reason == whole.done_reason and final.message.content == ""
    assert "".join(c.message.content for c in chunks) == whole.message.content
    assert final.eval_count == whole.eval_count > 0
    for duration in (final.total_duration, final.prompt_eval_duration, final.eval_duration):
        assert isinstance(duration, int) and 0 < duration < 60 * 10**9  # nanoseconds
    assert final.total_duration >= final.eval_duration


def test_generate_templates_the_prompt_and_raw_does_not(client, reference):
    chat = client.generate(model=MODEL, prompt=QUESTIONS[0], stream=False, options=GREEDY)
    assert chat.response == reference(QUESTIONS[0])
    raw = client.generate(model=MODEL, prompt="The sea is", raw=True, stream=False, options=GREEDY)
    assert raw.response == reference("The sea is", raw=True)
    streamed = list(client.generate(model=MODEL, prompt="The sea is", raw=True, stream=True, options=GREEDY))
    assert "".join(c.response for c in streamed) == raw.response and streamed[-1].done


def test_options_reach_the_decoder(client):
    limited = client.generate(
        model=MODEL,
        prompt="Count: one, two,",
        raw=True,
        stream=False,
        options={"temperature": 0, "num_predict": 3},
    )
    assert limited.eval_count == 3 and limited.done_reason == "length"
    stopped = client.generate(
        model=MODEL,
        prompt="Count: one, two,",
        raw=True,
        stream=False,
        options={"temperature": 0, "num_predict": 12, "stop": [","]},
    )
    assert "," not in stopped.response and stopped.done_reason == "stop"
    sampled = {
        "temperature": 1.0,
        "top_k": 50,
        "top_p": 0.95,
        "min_p": 0.05,
        "repeat_penalty": 1.2,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.5,
        "typical_p": 0.9,
        "seed": 7,
        "num_predict": 8,
    }
    first, second = (
        client.generate(
            model=MODEL, prompt="Once upon a time", raw=True, stream=False, options=sampled
        ).response
        for _ in range(2)
    )
    assert first == second  # a seed reproduces a sampled answer


def test_format_schema_answers_parse_and_fit_streamed_or_not(client):
    messages = [{"role": "user", "content": QUESTIONS[0]}]
    options = {"temperature": 0, "num_predict": 60}
    answer = client.chat(model=MODEL, messages=messages, format=COLORS, stream=False, options=options)
    assert answer.done_reason == "stop"
    jsonschema.validate(json.loads(answer.message.content), COLORS)
    chunks = list(client.chat(model=MODEL, messages=messages, format=COLORS, stream=True, options=options))
    assert "".join(c.message.content for c in chunks) == answer.message.content
    sampled = client.generate(
        model=MODEL,
        prompt="Colors:",
        raw=True,
        format=COLORS,
        stream=False,
        options={"temperature": 1.0, "seed": 3, "num_predict": 60},
    )
    jsonschema.validate(json.loads(sampled.response), COLORS)
    any_object = client.generate(
        model=MODEL, prompt=QUESTIONS[0], format="json", stream=False, options=options
    )
    assert isinstance(json.loads(any_object.response), dict)


def test_concurrent_clients_each_get_their_own_greedy_answer(server, reference):
    def ask(question: str) -> str:
        answer = ollama.Client(host=server.url).chat(
            model=MODEL, messages=[{"role": "user", "content": question}], options=GREEDY
        )
        return answer.message.content

    with ThreadPoolExecutor(len(QUESTIONS)) as pool:
        answers = list(pool.map(ask, QUESTIONS))
    assert answers == [reference(question) for question in QUESTIONS]


@pytest.mark.parametrize(
    "call, status, words",
    [
        (lambda c: c.chat(model="llama3", messages=[{"role": "user", "content": "Hi"}]), 404, "llama3"),
        (
            lambda c: c.generate(model=MODEL, prompt="Hi", options={"temperature": -1}),
            400,
            "options.temperature",
        ),
        (lambda c: c.generate(model=MODEL, prompt="Hi", options={"top_p": 1.5}), 400, "options.top_p"),
        (lambda c: c.generate(model=MODEL, prompt="Hi", options={"top_k": "many"}), 400, "options.top_k"),
        (lambda c: c.generate(model=MODEL, prompt="Hi", options={"mirostat": 2}), 400, "options.mirostat"),
        (
            lambda c: c.generate(model=MODEL, prompt="Hi", options={"num_predict": -5}),
            400,
            "options.num_predict",
        ),
        (lambda c: c.generate(model=MODEL, prompt="Hi", format={"type": "colour"}), 400, "'format'"),
        (
            lambda c: c.chat(model=MODEL, messages=[{"role": "user", "content": "Hi"}], format={"enum": []}),
            400,
            "'format'",
        ),
        (
            lambda c: c.generate(model=MODEL, prompt="Hi", logprobs=True, top_logprobs=21),
            400,
            "'top_logprobs'",
        ),
        (
            lambda c: c.chat(model=MODEL, messages=[{"role": "user", "content": "Hi"}], top_logprobs=3),
            400,
            "'top_logprobs'",
        ),
        (lambda c: c.chat(model=MODEL, messages=[{"role": "wizard", "content": "Hi"}]), 400, "messages"),
    ],
)
def test_bad_requests_are_refused_with_the_field_named(client, call, status, words):
    with pytest.raises(ollama.ResponseError) as caught:
        call(client)
    assert caught.value.status_code == status
    assert words in caught.value.error


@pytest.mark.parametrize(
    "content, status, words",
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b"", 400, "missing request body"),
        (b'{"model": 5, "prompt": "Hi"}', 400, "'model' must be a string"),
        (
            b'{"model": "smollm2-135m", "prompt": "Hi", "stream": "yes"}',
            400,
            "'stream' must be true or false",
        ),
        (b'{"model": "smollm2-135m", "prompt": "Hi", "options": {"temperature": NaN}}', 400, "NaN"),
        (b'{"model": "smollm2-135m", "messages": "Hi"}', 400, "'messages' must be an array"),
        (
            b'{"model": "smollm2-135m", "prompt": "Hi", "format": "xml"}',
            400,
            "'format' must be \"json\" or a JSON schema object, got a string",
        ),
    ],
)
def test_malformed_bodies_get_400_in_ollama_shape(server, content, status, words):
    path = "/api/chat" if b"messages" in content else "/api/generate"
    response = httpx.post(server.url + path, content=content, timeout=30)
    assert response.status_code == status
    assert words in response.json()["error"]


def test_too_long_prompt_gets_400_and_oversized_body_413(server):
    long_prompt = "word " * 9000  # ~9000 tokens: more than the 8192-token context
    response = httpx.post(
        server.url + "/api/generate", json={"model": MODEL, "prompt": long_prompt, "raw": True}, timeout=60
    )
    assert response.status_code == 400 and "context holds 8192" in response.json()["error"]
    huge = {"model": MODEL, "prompt": "x" * 2_000_000}
    response = httpx.post(server.url + "/api/generate", json=huge, timeout=60)
    assert response.status_code == 413 and "at most" in response.json()["error"]


def test_server_still_answers_and_holds_no_blocks_after_all_that(server, client):
    assert client.generate(model=MODEL, prompt="Hi", stream=False, options=GREEDY).done
    health = httpx.get(server.url + "/health").json()
    assert health["status"] == "ok" and health["kv_blocks_used"] == 0 and health["running"] == 0
