"""labkit's server under faults: a missing API key (401), a full queue (503 at once, both protocols), clients
that disconnect mid-stream or give up waiting (their requests aborted, every KV block freed), and the
server still answering correctly afterwards.

One real server process with ONE running slot, ONE waiting place and an API key serves the module."""

import time

import httpx
import ollama
import openai
import pytest

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"
KEY = "course-secret"
AUTH = {"Authorization": f"Bearer {KEY}"}
LONG = 400  # new tokens: a request that keeps the one slot busy for many seconds
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a long story about a dragon."}]}
SERVER_OPTIONS = {"max_num_seqs": 1, "max_waiting": 1, "api_key": KEY}  # the module's server (conftest.py)


def health(server) -> dict:
    return httpx.get(server.url + "/health", timeout=10).json()


def wait_for(server, condition, timeout: float = 20.0) -> dict:
    """/health once condition(it) holds (the engine publishes its state after each step)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = health(server)
        if condition(state):
            return state
        time.sleep(0.1)
    raise AssertionError(f"not reached after {timeout} s: {health(server)}")


def wait_until_idle(server) -> dict:
    """/health once nothing runs or waits (an abort takes effect at the engine's next turn)."""
    return wait_for(server, lambda state: state["running"] == 0 and state["waiting"] == 0)


def aborted_count(server) -> float:
    metrics = httpx.get(server.url + "/metrics", headers=AUTH, timeout=10).text
    lines = [
        line
        for line in metrics.splitlines()
        if line.startswith('labkit_requests_finished_total{reason="abort"}')
    ]
    return float(lines[0].split()[-1]) if lines else 0.0


def test_requests_without_the_key_get_401_in_each_shape(server):
    with pytest.raises(ollama.ResponseError) as caught:
        ollama.Client(host=server.url).list()
    assert caught.value.status_code == 401 and "API key" in caught.value.error
    with pytest.raises(openai.AuthenticationError) as caught:
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
    assert caught.value.body["code"] == 401
    assert httpx.get(server.url + "/metrics", timeout=10).status_code == 401
    assert health(server)["status"] == "ok"  # /health stays open for probes
    assert [m.model for m in ollama.Client(host=server.url, headers=AUTH).list().models] == [
        f"{MODEL}:latest"
    ]


def test_disconnect_mid_stream_aborts_and_frees_every_block(server):
    before = aborted_count(server)
    body = {**CHAT, "options": {"temperature": 0, "num_predict": LONG}}
    with httpx.stream("POST", server.url + "/api/chat", json=body, headers=AUTH, timeout=60) as response:
        lines = response.iter_lines()
        first, second = next(lines), next(lines)
        assert '"done": false' in first and '"done": false' in second
        assert health(server)["kv_blocks_used"] > 0
    state = wait_until_idle(server)  # leaving the block closed the connection mid-stream
    assert state["kv_blocks_used"] == 0
    assert aborted_count(server) == before + 1


def test_client_giving_up_on_a_non_streamed_answer_aborts_it(server):
    before = aborted_count(server)
    body = {**CHAT, "max_tokens": LONG, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            server.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=httpx.Timeout(30, read=1.5)
        )
    assert wait_until_idle(server)["kv_blocks_used"] == 0
    assert aborted_count(server) == before + 1


def test_full_queue_answers_503_at_once_in_both_protocols(server):
    body = {**CHAT, "options": {"temperature": 0, "num_predict": LONG}}
    with (
        httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as http,
        http.stream("POST", "/api/chat", json=body) as running,
    ):
        lines = running.iter_lines()  # kept: a dropped iterator would close the stream
        assert '"done": false' in next(lines)  # the one slot is busy
        with http.stream("POST", "/api/chat", json=body) as waiting:
            assert waiting.status_code == 200
            wait_for(server, lambda state: state["waiting"] == 1)
            start = time.monotonic()
            with pytest.raises(ollama.ResponseError) as caught:
                ollama.Client(host=server.url, headers=AUTH).chat(**CHAT, options={"num_predict": 4})
            assert caught.value.status_code == 503 and "busy" in caught.value.error
            with pytest.raises(openai.InternalServerError) as refused:
                openai.OpenAI(
                    base_url=server.url + "/v1", api_key=KEY, max_retries=0
                ).chat.completions.create(**CHAT, max_tokens=4)
            assert (
                refused.value.status_code == 503 and refused.value.body["type"] == "ServiceUnavailableError"
            )
            assert time.monotonic() - start < 5.0  # refused at once, not after the queue drains
    assert wait_until_idle(server)["kv_blocks_used"] == 0
    metrics = httpx.get(server.url + "/metrics", headers=AUTH, timeout=10).text
    assert "labkit_requests_rejected_total 2.0" in metrics


def test_server_still_answers_correctly_after_the_faults(server):
    answer = ollama.Client(host=server.url, headers=AUTH).chat(
        model=MODEL,
        messages=[{"role": "user", "content": "Name three primary colors."}],
        options={"temperature": 0, "num_predict": 8},
    )
    assert answer.done and answer.eval_count > 0 and answer.message.content
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Name three primary colors."}],
        max_tokens=8,
        temperature=0,
    )
    assert completion.choices[0].message.content == answer.message.content
    assert wait_until_idle(server)["kv_blocks_used"] == 0
