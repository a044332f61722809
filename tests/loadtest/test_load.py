"""The client-side timing and load generator of notebook 11 (labkit.loadtest: client, metrics_page, load).

Fast tests drive the app in process on the tiny random model (ASGITransport hands over a whole body at
once, so they check counts, text and parsing, not timing); the timing arithmetic is checked on its own;
one slow test loads the real server over TCP and compares the client's figures with the engine's."""

import asyncio
import math

import httpx
import pytest

from labkit.loadtest.client import (
    FrameClock,
    StreamTiming,
    client_tpot,
    parse_sse,
    sse_payload,
    stream_ollama,
    stream_openai,
)
from labkit.loadtest.load import load_test, open_loop, poisson_arrivals, question, sweep
from labkit.loadtest.load_result import LoadResult, sweep_table, ttft_breakdown
from labkit.loadtest.metrics_page import engine_summaries, metric_value
from labkit.serving.http import start_server
from labkit.serving.http.app import build_app
from labkit.serving.workload import QUESTIONS

NAME = "tiny"  # the model the `service` fixture serves (tests/conftest.py)
SERVICE_OPTIONS = {"max_waiting": 64}
HI = [{"role": "user", "content": "Hi"}]


def in_process(service, work):
    """Run work(http) against the app in process and return its result."""

    async def run():
        transport = httpx.ASGITransport(app=build_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as http:
            return await work(http)

    return asyncio.run(run())


def test_sse_parsing_skips_comments_and_stops_at_done():
    raw = 'data: {"a": 1}\n\n: ping\n\nevent: x\ndata:{"b": 2}\n\ndata: [DONE]\n\ndata: {"c": 3}\n\n'
    assert parse_sse(raw) == [{"a": 1}, {"b": 2}]
    assert sse_payload(": comment") is None and sse_payload("data: [DONE]") == "[DONE]"


def test_tpot_is_the_gap_after_the_first_token():
    assert client_tpot(0.2, 1.6, 15) == pytest.approx(0.1)
    assert math.isnan(client_tpot(0.2, 0.2, 1))
    clock = FrameClock()
    clock.frame("")  # a role-only chunk: a frame, not a token
    clock.frame("Hello")
    clock.frame(" there")
    timing = clock.timing(None)
    assert timing.text == "Hello there" and timing.output_tokens == 2
    assert 0 <= timing.first_frame_s <= timing.ttft_s <= timing.e2e_s


def test_openai_and_ollama_streams_agree_and_count_tokens(service, one_thread):
    async def both(http):
        return (
            await stream_openai(http, NAME, HI, max_tokens=5),
            await stream_ollama(http, NAME, HI, max_tokens=5),
        )

    openai_timing, ollama_timing = in_process(service, both)
    assert openai_timing.text == ollama_timing.text and openai_timing.text
    # max_tokens reached (EOS is unlikely)
    assert openai_timing.output_tokens == ollama_timing.output_tokens == 5
    assert ollama_timing.engine["eval_count"] == 5 and ollama_timing.engine["done_reason"] == "length"
    assert openai_timing.first_frame_s <= openai_timing.ttft_s  # the role chunk comes first


def test_a_refused_request_keeps_its_status_and_message(service, one_thread):
    timing = in_process(service, lambda http: stream_openai(http, "other", HI, max_tokens=2))
    assert timing.status == 404 and "not found" in timing.error and timing.output_tokens == 0
    timing = in_process(service, lambda http: stream_ollama(http, "other", HI, max_tokens=2))
    assert timing.status == 404 and "not found" in timing.error


def test_load_test_sends_every_request_and_the_metrics_count_them(service, one_thread):
    def finished(metrics_text):
        return metric_value(metrics_text, "labkit_requests_finished_total", reason="length")

    async def work(http):
        before = (await http.get("/metrics")).text
        result = await load_test(http, NAME, concurrency=3, requests_per_client=2, max_tokens=4)
        # The engine thread counts a request just after sending its last event: give the count up to 10 s to
        # catch up (it takes milliseconds when the machine is idle; a loaded 2-core machine needed over 2 s).
        for _ in range(500):
            after = (await http.get("/metrics")).text
            if finished(after) - finished(before) >= 6:
                break
            await asyncio.sleep(0.02)
        return before, result, after

    before, result, after = in_process(service, work)
    assert len(result.requests) == len(result.ok) == 6 and result.output_tokens == 24
    assert result.tokens_per_s == pytest.approx(24 / result.wall_s)
    assert finished(after) - finished(before) == 6
    ttft_sum, ttft_count = engine_summaries(after)["labkit_time_to_first_token_seconds"]
    assert ttft_count >= 6 and ttft_sum > 0
    with pytest.raises(ValueError, match="concurrency must be a whole number of 1 or more, got 0"):
        asyncio.run(load_test(None, NAME, concurrency=0))
    with pytest.raises(ValueError, match="requests_per_client must be a whole number of 1 or more, got 1.5"):
        asyncio.run(load_test(None, NAME, concurrency=1, requests_per_client=1.5))


def test_questions_mix_prompt_lengths_and_the_table_compares_levels():
    assert {question(i)[0]["content"] for i in range(len(QUESTIONS))} == set(QUESTIONS)
    clock = FrameClock()
    clock.frame("a")
    one = clock.timing(1)
    table = sweep_table([LoadResult(1, (one,), 2.0, 0.1, 0.05), LoadResult(4, (one,) * 4, 2.0)])
    assert "tokens/s" in table and "4.00x" in table.splitlines()[3] and "nan" in table.splitlines()[3]


def test_an_open_loop_sends_at_its_own_pace_and_its_prompts_are_fresh(service, one_thread):
    arrivals = poisson_arrivals(20.0, 6, seed=3)
    assert (
        arrivals[0] == 0.0 and arrivals == sorted(arrivals) and arrivals == poisson_arrivals(20.0, 6, seed=3)
    )
    result = in_process(
        service, lambda http: open_loop(http, NAME, rate=20.0, n_requests=6, max_tokens=3, seed=3, tag="t")
    )
    assert result.concurrency == 0 and result.arrival_rate == 20.0
    assert len(result.ok) == 6 and result.output_tokens == 18
    # each request was sent no earlier than its arrival time (the send times keep the Poisson gaps)
    sent = [r.sent_s - result.requests[0].sent_s for r in result.requests]
    assert all(s >= a - 0.005 for s, a in zip(sent, arrivals))
    assert question(2, tag="t") == [{"role": "user", "content": "Request t-2: " + question(2)[0]["content"]}]
    for bad in (0, -1.0, math.inf, "2", True):
        with pytest.raises(ValueError, match="rate must be a positive number"):
            poisson_arrivals(bad, 3)


def test_the_ttft_breakdown_adds_up_to_the_clients_ttft():
    timings = (StreamTiming("a", 1, 0.0, 0.4, 0.4, 0.4), StreamTiming("b", 1, 0.0, 0.6, 0.6, 0.6))
    result = LoadResult(2, timings, 1.0, engine_ttft_s=0.45, engine_queue_s=0.1)
    assert ttft_breakdown([result]).splitlines()[2].split() == ["2", "100", "350", "50", "500"]


@pytest.mark.slow
def test_real_server_sweep_client_figures_match_the_engine():
    with start_server("smollm2-135m", max_num_seqs=4) as server:
        results = asyncio.run(sweep(server.url, "smollm2-135m", [1, 4], requests_per_client=1, max_tokens=6))
        ollama_results = asyncio.run(
            sweep(server.url, "smollm2-135m", [2], requests_per_client=1, max_tokens=6, protocol="ollama")
        )
    for result in results + ollama_results:
        assert len(result.ok) == result.concurrency and result.output_tokens > 0
        # the client's TTFT includes HTTP and the chat template on top of the engine's: never less
        assert result.mean("ttft_s") >= result.engine_ttft_s > 0
        assert result.engine_tpot_s > 0
        assert 0 <= result.engine_queue_s <= result.engine_ttft_s  # the queue is part of the server's TTFT
    ttft = ollama_results[0].requests[0]
    assert ttft.engine["prompt_eval_duration"] / 1e9 <= ttft.ttft_s
