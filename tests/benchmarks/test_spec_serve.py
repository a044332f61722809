"""`python -m labkit.bench spec`: labkit's server with and without drafts beside llama-server with and without
its n-gram drafts, on copy and free-text chats; each server's settings, the table and the records."""

import math
import os

import pytest

from labkit.benchmarks import spec_serve as bench
from labkit.engines.llama_server import LlamaServerSettings, check_speculative_flags
from labkit.loadtest.client import StreamTiming
from labkit.loadtest.load_result import LoadResult
from labkit.serving.spec_load import PARAGRAPHS, copy_chat, story_chat


def level(tokens_per_s: float, drafted: int = 0, kept: int = 0, clients: int = 1) -> LoadResult:
    """A level of two answers of 10 tokens; the first carries the drafts in its timings."""
    answers = tuple(
        StreamTiming(
            "x",
            10,
            0.0,
            0.1,
            0.1,
            1.0,
            engine={"draft_n": drafted * (i == 0), "draft_n_accepted": kept * (i == 0)},
        )
        for i in range(2)
    )
    return LoadResult(clients, answers, 20 / tokens_per_s)


def test_each_workload_gives_every_request_a_prompt_of_its_own():
    for chat in bench.WORKLOADS.values():
        prompts = [str(chat(i, tag)) for tag in ("0c1", "0c2") for i in range(8)]
        assert len(set(prompts)) == len(prompts)
    copy = copy_chat(5, "t")[1]["content"]
    assert PARAGRAPHS[1] in copy  # the answer is in the prompt
    assert not any(p[:30] in story_chat(5, "t")[1]["content"] for p in PARAGRAPHS)


def test_the_servers_state_their_settings_and_quick_keeps_one_ngram_setting():
    full = {server.name: server for server in bench.spec_servers(seats=16)}
    assert list(full) == ["labkit server, fuse+q4_1", bench.LLAMA_PLAIN, *bench.LLAMA_NGRAMS]
    labkit = full["labkit server, fuse+q4_1"]
    assert labkit.rows == {bench.LABKIT_DRAFTS: {}, bench.LABKIT_PLAIN: {"speculative.n_max": 0}}
    assert "decode step compiled" in labkit.settings and "--speculative-tokens 4" in labkit.settings
    assert "--spec-type ngram-simple" in full["llama-server, ngram-simple"].settings
    assert "--spec-ngram-simple-size-n 3" in full["llama-server, ngram-simple n=3"].settings
    assert "--spec" not in full[bench.LLAMA_PLAIN].settings
    quick = [server.name for server in bench.spec_servers(seats=2, quick=True)]
    assert quick == ["labkit server, fuse+q4_1", bench.LLAMA_PLAIN, "llama-server, ngram-simple"]


def test_llama_server_takes_only_its_speculation_flags():
    settings = LlamaServerSettings("smollm2-135m", speculative=("--spec-type", "ngram-simple"))
    assert settings.command("127.0.0.1", 8080)[-2:] == ["--spec-type", "ngram-simple"]
    for bad in (["--spec-type", "ngram-simple"], ("--port", "1"), ("--spec-type", 4)):
        with pytest.raises(ValueError, match="speculative must"):
            check_speculative_flags(bad)


def test_records_compare_with_labkit_without_drafts_and_llama_servers_better_ngram_setting():
    results = {
        bench.LABKIT_DRAFTS: {"copy": [level(60, 40, 30)]},
        bench.LABKIT_PLAIN: {"copy": [level(30)]},
        bench.LLAMA_PLAIN: {"copy": [level(25)]},
        "llama-server, ngram-simple": {"copy": [level(35, 20, 10)]},
        "llama-server, ngram-simple n=3": {"copy": [level(40, 30, 20)]},
    }
    records = bench.records(results, (1,))
    assert [(r["bench"], r["ratio"]) for r in records] == [
        ("spec_labkit_copy_clients1_vs_no_drafts", 2.0),
        ("spec_labkit_copy_clients1_vs_llama_server_ngram", 1.5),
    ]
    assert records[1]["peer_name"].startswith("llama-server, ngram-simple n=3")
    lines = bench.table(results, (1,)).splitlines()
    drafted = next(line for line in lines if line.startswith(bench.LABKIT_DRAFTS))
    assert drafted.split()[-3:] == ["40", "75%", "2.00"]  # drafted, kept, vs the same server without drafts
    plain = next(line for line in lines if line.startswith(bench.LABKIT_PLAIN))
    assert plain.split()[-3:] == ["0", "-", "-"]


@pytest.mark.slow
def test_quick_run_prints_the_table_equal_answers_and_json_ratios(bench_quick_run):
    run = bench_quick_run("spec")
    assert "labkit server, fuse+q4_1: answers with and without drafts equal: yes" in run.stdout
    assert "every request answered whole: yes" in run.stdout
    for workload in bench.WORKLOADS:
        for clients in bench.QUICK["clients"]:
            assert f"spec_labkit_{workload}_clients{clients}_vs_no_drafts" in run.benches
    copy = [
        line
        for line in run.stdout.splitlines()
        if line.startswith(f"{bench.LABKIT_DRAFTS}  ") and " copy " in line
    ]
    assert copy and all(int(line.split()[-3]) > 0 for line in copy)  # the copy chats drafted
    if os.environ.get("CI") == "true":  # CI builds llama-server (make engines): its rows must be there
        assert "spec_labkit_copy_clients1_vs_llama_server_ngram" in run.benches
    assert all(math.isfinite(r["ratio"]) for r in run.records)
