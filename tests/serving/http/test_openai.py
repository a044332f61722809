"""labkit's server driven by the official, unmodified `openai` client (max_retries=0): models, chat
completions and completions, streaming (SSE ending with [DONE]) and not, usage counts, vLLM's extras;
greedy answers equal `labkit.generate`; structured output (`response_format`: json_schema, json_object, and
the client's own `parse` with a pydantic model); errors in OpenAI's shape; a bounded load test in which every
one of 64 concurrent streamed answers arrives whole and every KV block is free afterwards.

One real server process (SmolLM2-135M-Instruct, labkit's Llama) on 127.0.0.1 serves the whole module."""

import asyncio
import json

import httpx
import jsonschema
import openai
import pydantic
import pytest

import labkit

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"
NEW_TOKENS = 8
QUESTION = [{"role": "user", "content": "Name three primary colors."}]
LOAD_REQUESTS = 64  # concurrent streamed requests in the load test
LOAD_TOKENS = 4  # new tokens each
COLORS = {
    "type": "object",
    "properties": {
        "colors": {"type": "array", "maxItems": 3, "items": {"enum": ["red", "yellow", "blue", "green"]}}
    },
    "required": ["colors"],
    "additionalProperties": False,
}
COLORS_FORMAT = {"type": "json_schema", "json_schema": {"name": "colors", "schema": COLORS, "strict": True}}
SERVER_OPTIONS = {"max_num_seqs": 8, "max_waiting": 64}  # the module's server (conftest.py)


class Capital(pydantic.BaseModel):
    city: str


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def greedy(model, tokenizer, prompt_ids, n=NEW_TOKENS) -> str:
    return "".join(step.text for step in labkit.generate(model, tokenizer, prompt_ids, max_new_tokens=n))


def test_models_lists_the_served_model(client):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL] and models[0].object == "model"


def test_chat_completion_equals_labkit_generate_with_usage(client, smollm2_labkit, tokenizer):
    answer = client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=NEW_TOKENS, temperature=0
    )
    prompt_ids = labkit.chat_prompt(tokenizer, QUESTION)
    assert answer.object == "chat.completion" and answer.choices[0].message.role == "assistant"
    assert answer.choices[0].message.content == greedy(smollm2_labkit, tokenizer, prompt_ids)
    assert answer.choices[0].finish_reason == "length"
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (len(prompt_ids), NEW_TOKENS)
    assert answer.usage.total_tokens == len(prompt_ids) + NEW_TOKENS


def test_chat_stream_sends_role_pieces_finish_and_usage(client):
    whole = client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=NEW_TOKENS, temperature=0
    )
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=QUESTION,
            max_tokens=NEW_TOKENS,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == NEW_TOKENS
    assert chunks[-2].choices[0].finish_reason == "length"
    text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
    assert text == whole.choices[0].message.content
    plain = list(
        client.chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=2, temperature=0, stream=True
        )
    )
    assert all(c.choices and c.usage is None for c in plain)  # no usage chunk unless asked for


def test_completions_stream_and_not_equal_labkit_generate(client, smollm2_labkit, tokenizer):
    expected = greedy(smollm2_labkit, tokenizer, labkit.encode_prompt(tokenizer, "The sea is"))
    answer = client.completions.create(model=MODEL, prompt="The sea is", max_tokens=NEW_TOKENS, temperature=0)
    assert answer.object == "text_completion" and answer.choices[0].text == expected
    chunks = list(
        client.completions.create(
            model=MODEL, prompt="The sea is", max_tokens=NEW_TOKENS, temperature=0, stream=True
        )
    )
    assert "".join(c.choices[0].text for c in chunks) == expected
    assert (
        client.completions.create(model=MODEL, prompt="The sea is", temperature=0).usage.completion_tokens
        == 16
    )


def test_raw_sse_frames_end_with_done(server):
    body = {"model": MODEL, "messages": QUESTION, "max_tokens": 2, "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    events = text.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    assert all(event.startswith("data: {") for event in events[:-2])


def test_vllm_extras_and_seed_reproduce_a_sample(client):
    extras = {"top_k": 50, "min_p": 0.05, "repetition_penalty": 1.2}

    def sample() -> str:
        return (
            client.completions.create(
                model=MODEL,
                prompt="Once upon a time",
                max_tokens=8,
                temperature=1.0,
                top_p=0.95,
                seed=11,
                presence_penalty=0.3,
                extra_body=extras,
            )
            .choices[0]
            .text
        )

    assert sample() == sample()
    stop = client.completions.create(
        model=MODEL, prompt="Count: one, two,", max_tokens=12, temperature=0, stop=","
    )
    assert "," not in stop.choices[0].text and stop.choices[0].finish_reason == "stop"


@pytest.mark.parametrize(
    "options, error, param",
    [
        ({"model": "gpt-4o"}, openai.NotFoundError, "model"),
        ({"temperature": -0.5}, openai.BadRequestError, "temperature"),
        ({"top_p": 1.5}, openai.BadRequestError, "top_p"),
        ({"max_tokens": -1}, openai.BadRequestError, "max_tokens"),
        ({"max_tokens": 9000}, openai.BadRequestError, "max_tokens"),
        ({"n": 9}, openai.BadRequestError, "n"),
        ({"presence_penalty": 5}, openai.BadRequestError, "presence_penalty"),
        ({"extra_body": {"top_k": "ten"}}, openai.BadRequestError, "top_k"),
        ({"extra_body": {"repetition_penalty": 0}}, openai.BadRequestError, "repetition_penalty"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            openai.BadRequestError,
            "messages",
        ),
        ({"top_logprobs": 2}, openai.BadRequestError, "top_logprobs"),
        ({"response_format": "json"}, openai.BadRequestError, "response_format"),
        ({"response_format": {"type": "xml"}}, openai.BadRequestError, "response_format.type"),
        ({"response_format": {"type": "json_schema"}}, openai.BadRequestError, "response_format.json_schema"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": COLORS}}},
            openai.BadRequestError,
            "response_format.json_schema.name",
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "colour"}},
                }
            },
            openai.BadRequestError,
            "response_format.json_schema.schema",
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": COLORS, "strict": 1},
                }
            },
            openai.BadRequestError,
            "response_format.json_schema.strict",
        ),
    ],
)
def test_bad_requests_raise_the_right_client_error(client, options, error, param):
    request = {"model": MODEL, "messages": QUESTION, "max_tokens": 2, **options}
    with pytest.raises(error) as caught:
        client.chat.completions.create(**request)
    assert caught.value.body["param"] == param and caught.value.body["code"] == caught.value.status_code
    assert param in caught.value.message


def test_json_schema_answers_parse_and_fit_streamed_or_not(client):
    request = {
        "model": MODEL,
        "messages": QUESTION,
        "max_tokens": 60,
        "temperature": 0,
        "response_format": COLORS_FORMAT,
    }
    answer = client.chat.completions.create(**request)
    assert answer.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(answer.choices[0].message.content), COLORS)
    chunks = list(client.chat.completions.create(**request, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == answer.choices[0].message.content
    sampled = client.completions.create(
        model=MODEL,
        prompt="Colors:",
        max_tokens=60,
        temperature=1.0,
        seed=3,
        extra_body={"response_format": COLORS_FORMAT},
    )
    jsonschema.validate(json.loads(sampled.choices[0].text), COLORS)


def test_json_object_and_the_clients_parse_get_json(client):
    answer = client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=60, temperature=0, response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(answer.choices[0].message.content), dict)
    question = [{"role": "user", "content": "What is the capital of France? Answer in JSON."}]
    parsed = client.chat.completions.parse(
        model=MODEL, messages=question, max_tokens=60, temperature=0, response_format=Capital
    )
    assert parsed.choices[0].message.parsed == Capital(city="Paris")


def test_malformed_json_and_unknown_paths_in_openai_shape(server):
    response = httpx.post(server.url + "/v1/chat/completions", content=b'{"model": ', timeout=30)
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]
    response = httpx.post(
        server.url + "/v1/completions", json={"model": MODEL, "prompt": [[1, 2], [3]]}, timeout=30
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "prompt"
    response = httpx.get(server.url + "/v1/embeddings", timeout=30)
    assert response.status_code == 404 and response.json()["error"]["type"] == "NotFoundError"


async def stream_one(client: openai.AsyncOpenAI, index: int) -> tuple[str, int, str]:
    """One streamed chat answer: its text, its usage count, its finish reason."""
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": f"Say the number {index}."}],
        max_tokens=LOAD_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage, finish = "", None, None
    async for chunk in stream:
        if chunk.usage:
            usage = chunk.usage.completion_tokens
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return text, usage, finish


def test_load_every_concurrent_stream_arrives_whole(server):
    async def run_all():
        async with openai.AsyncOpenAI(
            base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300
        ) as client:
            return await asyncio.gather(*(stream_one(client, i) for i in range(LOAD_REQUESTS)))

    results = asyncio.run(run_all())
    assert len(results) == LOAD_REQUESTS
    for text, usage, finish in results:
        assert usage in range(1, LOAD_TOKENS + 1) and finish in ("stop", "length") and text
        assert (usage == LOAD_TOKENS) == (finish == "length")
    health = httpx.get(server.url + "/health").json()
    assert (health["running"], health["waiting"], health["kv_blocks_used"]) == (0, 0, 0)
    metrics = httpx.get(server.url + "/metrics").text
    counts = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines() if "_count " in line}
    assert counts["labkit_time_to_first_token_seconds_count"] >= LOAD_REQUESTS
    assert counts["labkit_time_per_output_token_seconds_count"] >= LOAD_REQUESTS
    assert "labkit_kv_blocks_used 0.0" in metrics
