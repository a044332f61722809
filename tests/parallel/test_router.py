"""The router (labkit.parallel.router) in front of two real labkit servers of SmolLM2: round-robin alternates,
the prefix policy sends a conversation back to the replica that holds its history, answers through it are a
replica's own, a replica's error passes through, a dead replica is a clear 502 while the other keeps
serving, and nothing is left running. The replicas start once for the module."""

import socket

import httpx
import openai
import pytest

from labkit.launcher import free_port
from labkit.parallel.router import Route, block_hashes, prompt_text, start_router
from labkit.parallel.routing_run import chat_trace, compare_routing, routing_table, run_policy
from labkit.serving.http.server import start_server

MODEL = "smollm2-135m"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
SYSTEM = "You are a terse assistant for a course on serving language models. Answer in one short sentence."

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def replicas():
    """Two servers of SmolLM2, one torch thread and two seats each; stopped (and checked gone) after."""
    with (
        start_server(MODEL, max_num_seqs=2, env=ONE_THREAD) as a,
        start_server(MODEL, max_num_seqs=2, env=ONE_THREAD) as b,
    ):
        yield [a.url, b.url]
        handles = (a, b)
    for handle in handles:
        assert not handle.is_running()


def chat(url: str, messages: list[dict], **options) -> openai.types.chat.ChatCompletion:
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    return client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=options.pop("max_tokens", 4), temperature=0, **options
    )


def hits(url: str) -> float:
    page = httpx.get(url + "/metrics").text
    return sum(
        float(line.split()[-1])
        for line in page.splitlines()
        if line.startswith("labkit_prefix_cache_hits_total")
    )


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_prompt_text_and_its_blocks_chain():
    body = {"messages": [{"role": "system", "content": "a" * 100}, {"role": "user", "content": "b" * 60}]}
    text = prompt_text("/v1/chat/completions", body)
    assert text == f"<system>{'a' * 100}</system><user>{'b' * 60}</user>"
    longer = block_hashes(text + "more" * 40)
    assert block_hashes(text) == longer[: len(block_hashes(text))]  # a longer prompt extends the chain
    assert block_hashes("x" + text)[0] != block_hashes(text)[0]
    assert prompt_text("/v1/completions", {"prompt": "The sea is"}) == "The sea is"


def test_round_robin_alternates(replicas):
    with start_router(replicas, "round-robin") as router:
        for turn in range(4):
            assert chat(router.url, [{"role": "user", "content": f"Say {turn}."}], max_tokens=1).choices
        assert [route.replica for route in router.routes] == [0, 1, 0, 1]
        assert router.per_replica() == [2, 2]


def test_the_prefix_policy_sends_a_conversation_back_to_the_replica_that_holds_it(replicas):
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is a KV cache?"}]
    other = [{"role": "system", "content": "Other session. " + SYSTEM}, {"role": "user", "content": "Hi."}]
    with start_router(replicas, "prefix") as router:
        answer = chat(router.url, first).choices[0].message.content
        chat(router.url, other)  # no prefix held anywhere: the least busy, the next one in turn
        home = router.routes[0].replica
        assert router.routes[1].replica == 1 - home
        before = hits(replicas[home])
        for question in ("Why does it grow?", "How large is it?"):
            first += [{"role": "assistant", "content": answer}, {"role": "user", "content": question}]
            answer = chat(router.url, first).choices[0].message.content
        assert [route.replica for route in router.routes[2:]] == [home, home]
        assert all(route.matched_blocks >= len(block_hashes(SYSTEM)) for route in router.routes[2:])
        assert hits(replicas[home]) > before  # the replica found the history in its prefix cache


def test_answers_through_the_router_equal_a_replicas_own(replicas):
    messages = [{"role": "user", "content": "Name three colours."}]
    direct = chat(replicas[0], messages, max_tokens=8).choices[0].message.content
    with start_router(replicas, "round-robin") as router:
        for _ in range(2):  # once from each replica
            assert chat(router.url, messages, max_tokens=8).choices[0].message.content == direct
        client = openai.OpenAI(base_url=router.url + "/v1", api_key="none", max_retries=0)
        stream = client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=8, temperature=0, stream=True
        )
        assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == direct
        text = client.completions.create(model=MODEL, prompt="The sea is", max_tokens=4, temperature=0)
        assert text.choices[0].text == (
            openai.OpenAI(base_url=replicas[0] + "/v1", api_key="none")
            .completions.create(model=MODEL, prompt="The sea is", max_tokens=4, temperature=0)
            .choices[0]
            .text
        )


def test_a_replicas_error_passes_through_in_its_shape(replicas):
    with start_router(replicas, "prefix") as router:
        answer = httpx.post(
            router.url + "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "temperature": -1},
        )
        assert answer.status_code == 400
        assert answer.json()["error"]["param"] == "temperature"
        assert router.routes[-1].status == 400


def test_a_dead_replica_is_a_clear_502_and_the_other_keeps_serving(replicas):
    dead = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    with start_router([replicas[0], dead], "round-robin", retry_s=60) as router:
        assert chat(router.url, [{"role": "user", "content": "Hi"}], max_tokens=1).choices
        with pytest.raises(openai.APIStatusError) as refused:
            chat(router.url, [{"role": "user", "content": "Hi"}], max_tokens=1)
        assert refused.value.status_code == 502
        error = refused.value.body
        assert error["type"] == "BadGatewayError" and "could not be reached" in error["message"]
        assert dead in error["message"]
        for _ in range(2):  # skipped from now on: every request goes to the live one
            assert chat(router.url, [{"role": "user", "content": "Hi"}], max_tokens=1).choices
        assert [(route.replica, route.status) for route in router.routes] == [
            (0, 200),
            (1, 502),
            (0, 200),
            (0, 200),
        ]
        health = httpx.get(router.url + "/health").json()
        assert [replica["up"] for replica in health["replicas"]] == [True, False]


def test_a_stopped_router_leaves_no_thread_or_port(replicas):
    router = start_router(replicas, "prefix")
    port = int(router.url.rsplit(":", 1)[1])
    assert httpx.get(router.url + "/health").json()["status"] == "ok"
    router.stop()
    assert not router.thread.is_alive() and port_is_free(port)
    with pytest.raises(httpx.ConnectError):
        httpx.get(router.url + "/health")


def test_a_trace_through_each_policy_counts_every_request(replicas):
    trace = chat_trace(3, 2)
    results = [
        run_policy(policy, replicas, trace, MODEL, 2, session)
        for session, policy in ((7, "round-robin"), (8, "prefix"))
    ]
    for result in results:
        assert sum(result.per_replica) == 6 and result.errors == 0
        assert 0 < result.cached_tokens < result.prompt_tokens  # the shared system prompt at least
        assert result.ttft_median_s <= result.ttft_p95_s
    assert results[0].per_replica == (3, 3)
    assert "round-robin" in routing_table(results)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="policy"):
        start_router(["http://127.0.0.1:1"], "random")
    with pytest.raises(ValueError, match="urls"):
        start_router(["127.0.0.1:1"])
    with pytest.raises(ValueError, match="policies"):
        compare_routing(policies=("random",))
    assert Route("/v1/completions", 0, 200, 0).replica == 0
