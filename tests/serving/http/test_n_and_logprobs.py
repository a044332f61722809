"""`n`, log-probabilities and the thinking budget through the official, unmodified `openai` and `ollama`
clients: n seeded choices reproduce (streamed or not, each choice its index, usage counting every choice
and the prompt once), sample i is the request alone with seed + i, greedy choices agree; every token's
log-probability and its alternatives equal log_softmax of labkit's own forward pass over the same ids (the
model's raw distribution), in OpenAI's chat and completions shapes and in Ollama's; `thinking_token_budget`
ends a prompted thinking section as `labkit.generate` does; bad values are refused naming the field in each
protocol's shape; a client that leaves aborts every sample; and afterwards no request runs and every KV
block is free, with each sample counted in /metrics.

One real server process (SmolLM2-135M-Instruct, labkit's Llama, 4 seats) on 127.0.0.1 serves the module."""

import time

import httpx
import ollama
import openai
import pytest
import torch

import labkit
from labkit.core.forward import all_logits
from labkit.decoding.thinking import thinking_prompt
from labkit.serving.http.logprobs import BYTE_LEVEL

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"
SEATS = 4
QUESTION = [{"role": "user", "content": "Name a colour."}]
SAMPLED = {"temperature": 1.0, "seed": 7, "max_tokens": 5}
# log_softmax of the engine's batched logits vs one plain forward pass over the same ids, SmolLM2 float32:
# differences are ~1e-5 (logits reach ~30); a row from the wrong position differs by 0.1-10.
LOGPROB_ATOL = 2e-3
CHAR_OF_BYTE = {byte: char for char, byte in BYTE_LEVEL.items()}  # GPT-2's byte-level alphabet
SERVER_OPTIONS = {"max_num_seqs": SEATS, "max_waiting": 16}  # the module's server (conftest.py)


def token_id(tokenizer, raw: list[int]) -> int:
    """The id of the token whose UTF-8 bytes are `raw` (SmolLM2's vocabulary is byte-level)."""
    return tokenizer.convert_tokens_to_ids("".join(CHAR_OF_BYTE[byte] for byte in raw))


def reference_rows(model, prompt_ids: list[int], generated: list[int]) -> torch.Tensor:
    """log_softmax of labkit's forward pass at each generated position [len(generated), V]."""
    logits = all_logits(model, prompt_ids + generated)[len(prompt_ids) - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1)


def assert_chat_logprobs_are_the_models(content, model, tokenizer, prompt_ids, k):
    """Each entry (and its k alternatives, most likely first) equals the forward pass at its position."""
    generated = [token_id(tokenizer, entry.bytes) for entry in content]
    for entry, row in zip(content, reference_rows(model, prompt_ids, generated)):
        assert abs(entry.logprob - row[token_id(tokenizer, entry.bytes)]) < LOGPROB_ATOL
        values = [top.logprob for top in entry.top_logprobs]
        assert len(values) == k and values == sorted(values, reverse=True)
        assert all(
            abs(top.logprob - row[token_id(tokenizer, top.bytes)]) < LOGPROB_ATOL
            for top in entry.top_logprobs
        )
        assert abs(values[0] - row.max()) < LOGPROB_ATOL  # the first alternative is the most likely token


def stream_by_index(chunks) -> dict:
    """index -> (role, text, finish_reason, logprob entries) of a streamed chat answer."""
    seen = {}
    for chunk in chunks:
        for choice in chunk.choices:
            role, text, finish, entries = seen.get(choice.index, (None, "", None, []))
            seen[choice.index] = (
                role or choice.delta.role,
                text + (choice.delta.content or ""),
                finish or choice.finish_reason,
                entries + (choice.logprobs.content if choice.logprobs else []),
            )
    return seen


def test_n_seeded_choices_reproduce_with_their_indices_and_usage(client, tokenizer):
    request = {"model": MODEL, "messages": QUESTION, "n": 3, "logprobs": True, **SAMPLED}
    answer = client.chat.completions.create(**request)
    assert [choice.index for choice in answer.choices] == [0, 1, 2]
    assert [c.message.content for c in client.chat.completions.create(**request).choices] == [
        c.message.content for c in answer.choices
    ]
    counts = [len(choice.logprobs.content) for choice in answer.choices]
    assert all(1 <= count <= SAMPLED["max_tokens"] for count in counts)
    assert answer.usage.prompt_tokens == len(labkit.chat_prompt(tokenizer, QUESTION))
    assert answer.usage.completion_tokens == sum(counts)
    alone = client.chat.completions.create(**{**request, "n": 1, "seed": SAMPLED["seed"] + 2})
    assert alone.choices[0].message.content == answer.choices[2].message.content  # sample i: seed + i


def test_n_streamed_gives_every_index_its_role_text_finish_and_usage(client):
    request = {"model": MODEL, "messages": QUESTION, "n": 3, "logprobs": True, **SAMPLED}
    whole = client.chat.completions.create(**request)
    chunks = list(
        client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True})
    )
    seen = stream_by_index(chunks[:-1])
    assert sorted(seen) == [0, 1, 2] and chunks[-1].choices == []
    for index, (role, text, finish, entries) in seen.items():
        choice = whole.choices[index]
        assert (role, text, finish) == ("assistant", choice.message.content, choice.finish_reason)
        assert [e.token for e in entries] == [e.token for e in choice.logprobs.content]
    assert chunks[-1].usage == whole.usage
    assert sum(1 for c in chunks[:-1] if c.choices[0].finish_reason) == 3  # one finish chunk per index


def test_greedy_choices_are_equal_and_completions_take_n(client):
    answer = client.chat.completions.create(model=MODEL, messages=QUESTION, n=2, temperature=0, max_tokens=5)
    assert answer.choices[0].message.content == answer.choices[1].message.content
    texts = client.completions.create(model=MODEL, prompt="The sea is", n=2, temperature=0, max_tokens=4)
    assert [c.index for c in texts.choices] == [0, 1] and texts.choices[0].text == texts.choices[1].text
    assert texts.usage.completion_tokens == 8


def test_chat_logprobs_equal_labkits_own_forward_pass(client, smollm2_labkit, tokenizer):
    answer = client.chat.completions.create(
        model=MODEL, messages=QUESTION, logprobs=True, top_logprobs=5, frequency_penalty=1.0, **SAMPLED
    )
    content = answer.choices[0].logprobs.content
    assert len(content) == answer.usage.completion_tokens
    assert bytes(b for entry in content for b in entry.bytes).decode() == answer.choices[0].message.content
    prompt_ids = labkit.chat_prompt(tokenizer, QUESTION)
    assert_chat_logprobs_are_the_models(content, smollm2_labkit, tokenizer, prompt_ids, k=5)


def test_completions_logprobs_have_openais_legacy_shape_streamed_or_not(client, smollm2_labkit, tokenizer):
    request = {"model": MODEL, "prompt": "The sea is", "logprobs": 2, "temperature": 0, "max_tokens": 4}
    answer = client.completions.create(**request).choices[0]
    logprobs = answer.logprobs
    assert "".join(logprobs.tokens) == answer.text and len(logprobs.token_logprobs) == 4
    assert logprobs.text_offset == [sum(len(t) for t in logprobs.tokens[:i]) for i in range(4)]
    for token, value, top in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs):
        assert len(top) == 2 and top[token] == value == max(top.values())  # greedy: the chosen is the top one
    ids = labkit.encode_prompt(tokenizer, "The sea is")
    steps = list(labkit.generate(smollm2_labkit, tokenizer, ids, max_new_tokens=4))
    assert "".join(step.text for step in steps) == answer.text
    rows = reference_rows(smollm2_labkit, ids, [step.token_id for step in steps])
    assert all(abs(value - row.max()) < LOGPROB_ATOL for value, row in zip(logprobs.token_logprobs, rows))
    chunks = list(client.completions.create(**request, stream=True))
    streamed = [c.choices[0].logprobs for c in chunks if c.choices[0].logprobs]
    assert [t for lp in streamed for t in lp.tokens] == logprobs.tokens
    assert [o for lp in streamed for o in lp.text_offset] == logprobs.text_offset


def test_ollama_logprobs_equal_the_openai_routes_streamed_or_not(client, ollama_client):
    chat = client.chat.completions.create(
        model=MODEL, messages=QUESTION, logprobs=True, top_logprobs=3, temperature=0, max_tokens=5
    )
    expected = chat.choices[0].logprobs.content
    answer = ollama_client.chat(
        model=MODEL,
        messages=QUESTION,
        stream=False,
        logprobs=True,
        top_logprobs=3,
        options={"temperature": 0, "num_predict": 5},
    )
    assert (
        answer.message.content == chat.choices[0].message.content
        and len(answer.logprobs) == answer.eval_count
    )
    for got, want in zip(answer.logprobs, expected):
        assert got.token == want.token and abs(got.logprob - want.logprob) < LOGPROB_ATOL
        assert [t.token for t in got.top_logprobs] == [t.token for t in want.top_logprobs]
    parts = list(
        ollama_client.generate(
            model=MODEL,
            prompt=QUESTION[0]["content"],
            stream=True,
            logprobs=True,
            options={"temperature": 0, "num_predict": 5},
        )
    )
    entries = [entry for part in parts for entry in part.logprobs or []]
    # /api/generate: the same template
    assert [e.token for e in entries] == [e.token for e in answer.logprobs]
    assert all(e.top_logprobs is None for e in entries)  # top_logprobs 0: only the chosen tokens


def test_a_thinking_budget_ends_the_prompted_section_as_labkit_generate_does(
    client, smollm2_labkit, tokenizer
):
    prompt = thinking_prompt(tokenizer, "What is 12 + 7?")
    answer = (
        client.completions.create(
            model=MODEL, prompt=prompt, temperature=0, max_tokens=10, extra_body={"thinking_token_budget": 3}
        )
        .choices[0]
        .text
    )
    assert "</think>" in answer
    assert answer == labkit.generate_text(
        smollm2_labkit, tokenizer, prompt, thinking_budget=3, max_new_tokens=10
    )


@pytest.mark.parametrize(
    "route, fields, param",
    [
        ("chat", {"n": 0}, "n"),
        ("chat", {"n": SEATS + 1}, "n"),
        ("chat", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("chat", {"top_logprobs": 2}, "top_logprobs"),
        ("chat", {"extra_body": {"thinking_token_budget": -1}}, "thinking_token_budget"),
        ("completions", {"logprobs": 6}, "logprobs"),
        ("completions", {"n": 0}, "n"),
    ],
)
def test_bad_n_and_logprobs_are_refused_in_openais_shape(client, route, fields, param):
    with pytest.raises(openai.BadRequestError) as caught:
        if route == "chat":
            client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=2, **fields)
        else:
            client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, **fields)
    assert caught.value.body["param"] == param and f"'{param}'" in caught.value.message


@pytest.mark.parametrize("fields", [{"logprobs": True, "top_logprobs": 21}, {"top_logprobs": 2}])
def test_bad_logprobs_are_refused_in_ollamas_shape(ollama_client, fields):
    with pytest.raises(ollama.ResponseError) as caught:
        ollama_client.generate(model=MODEL, prompt="Hi", options={"num_predict": 2}, **fields)
    assert caught.value.status_code == 400 and "'top_logprobs'" in caught.value.error


def counted(server, name: str) -> float:
    """The sum of a counter's samples on /metrics (every label), e.g. requests finished for any reason."""
    metrics = httpx.get(server.url + "/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(name))


def wait_until_idle(server, timeout: float = 30.0) -> dict:
    """/health once nothing runs or waits (an abort takes effect at the engine's next turn)."""
    deadline = time.monotonic() + timeout
    while (health := httpx.get(server.url + "/health", timeout=10).json())["running"] or health["waiting"]:
        assert time.monotonic() < deadline, f"still busy after {timeout} s: {health}"
        time.sleep(0.1)
    return health


def test_a_client_that_leaves_aborts_every_sample_and_each_is_counted(server, client):
    aborted, tokens = 'labkit_requests_finished_total{reason="abort"}', "labkit_generation_tokens_total"
    before, tokens_before = counted(server, aborted), counted(server, tokens)
    # no sample ends by itself
    stream = client.chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        n=3,
        max_tokens=300,
        temperature=1.0,
        stream=True,
        extra_body={"min_tokens": 300},
    )
    next(iter(stream)), stream.close()
    deadline = time.monotonic() + 30  # the abort takes effect at the engine's next turn
    while counted(server, aborted) < before + 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert counted(server, aborted) == before + 3  # each sample counted once
    assert counted(server, tokens) - tokens_before < 3 * 300  # stopped long before their limit
    assert wait_until_idle(server)["kv_blocks_used"] == 0
    client.completions.create(model=MODEL, prompt="Hi", n=2, max_tokens=2)  # the server still serves


def test_afterwards_nothing_runs_and_every_kv_block_is_free(server):
    health = wait_until_idle(server)
    assert health["kv_blocks_used"] == 0
    metrics = httpx.get(server.url + "/metrics", timeout=10).text
    assert "labkit_requests_running 0.0" in metrics and "labkit_kv_blocks_used 0.0" in metrics
