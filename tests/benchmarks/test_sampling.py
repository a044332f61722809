"""`python -m labkit.bench sampling`: n samples from one prefill against one request and n separate requests
(prefix cache off and on), one JSON line per ratio, the settings, and the same answers from every way; then
the servers, n in one request against n parallel requests, like with like."""

import pytest

from labkit.benchmarks.sampling_servers import (
    LIKE_WITH_LIKE,
    ONE_REQUEST,
    PARALLEL,
    ServerSampling,
    choice_tokens,
    server_records,
)
from labkit.engines.install import llama_server_installed


class WordTokenizer:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": text.split()}


def test_a_choice_counts_max_tokens_when_cut_and_its_text_plus_the_stop_token_when_it_stopped():
    assert choice_tokens({"text": "a b", "finish_reason": "length"}, 8, WordTokenizer()) == 8
    assert choice_tokens({"text": "a b c", "finish_reason": "stop"}, 8, WordTokenizer()) == 4


def test_server_records_compare_like_with_like_against_the_peers_faster_way():
    rows = [
        ServerSampling("labkit server, fuse+q4_1", ONE_REQUEST, (90.0, 100.0, 110.0)),
        ServerSampling("labkit server, fuse+q4_1", PARALLEL, (50.0,)),
        ServerSampling("llama-server", ONE_REQUEST, (200.0,)),
        ServerSampling("llama-server", PARALLEL, (80.0,)),
        ServerSampling("vLLM CPU", ONE_REQUEST, error="HTTP 400: n"),
        ServerSampling("labkit server, float32", ONE_REQUEST, (40.0,)),
        ServerSampling("vLLM CPU", PARALLEL, (50.0,)),
        ServerSampling("vLLM CPU, all cores", PARALLEL, (80.0,)),
    ]
    records = {record["bench"]: record for record in server_records(rows, 8)}
    assert set(records) == {
        "sampling_server_labkit_fuse_q4_1_n8_vs_parallel_requests",
        "sampling_server_labkit_fuse_q4_1_n8_vs_llama_server",
        "sampling_server_labkit_float32_n8_vs_vLLM_CPU",
    }
    assert (
        records["sampling_server_labkit_float32_n8_vs_vLLM_CPU"]["peer_name"]
        == "vLLM CPU, all cores, 8 parallel requests"
    )
    assert records["sampling_server_labkit_fuse_q4_1_n8_vs_parallel_requests"]["ratio"] == 2.0
    assert records["sampling_server_labkit_fuse_q4_1_n8_vs_llama_server"]["ratio"] == 0.5
    assert (
        records["sampling_server_labkit_fuse_q4_1_n8_vs_llama_server"]["peer_name"]
        == "llama-server, 1 request, n=8"
    )
    assert "refused: HTTP 400" in rows[4].describe(8)
    assert LIKE_WITH_LIKE["labkit server, float32"] == ("vLLM CPU", "vLLM CPU, all cores")


@pytest.mark.slow
def test_quick_run_prints_json_ratios_and_the_same_answers(bench_quick_run):
    run = bench_quick_run("sampling")
    in_process = {
        "sampling_n4_vs_one_request",
        "sampling_n4_vs_separate_no_prefix_cache",
        "sampling_n4_vs_separate_prefix_cache",
        "sampling_n4_kv_blocks_vs_separate_no_prefix_cache",
    }
    servers = {
        "sampling_server_labkit_float32_n4_vs_parallel_requests",
        "sampling_server_labkit_fuse_q4_1_n4_vs_parallel_requests",
    }
    if llama_server_installed():
        servers.add("sampling_server_labkit_fuse_q4_1_n4_vs_llama_server")
    assert {record["bench"] for record in run.records} == in_process | servers
    assert {record["metric"] for record in run.records} == {"tokens_per_second", "kv_blocks"}
    blocks = next(r for r in run.records if r["metric"] == "kv_blocks")
    assert blocks["labkit"] < blocks["peer"]  # shared prompt blocks: fewer blocks than 4 copies of the prompt
    assert "same 4 answers from the shared request and the separate ones: yes" in run.stdout
    assert "machine:" in run.stdout and "aims:" in run.stdout and "prompt 64 tokens" in run.stdout
    assert any(
        line.startswith("labkit server, float32") and "1 request, n=4" in line
        for line in run.stdout.splitlines()
    )
