"""labkit.benchmarks.engines: notebook 12's engines timed under each OpenMP wait policy, each row kept at its
fastest (no model loads and no engine starts here; tests/engines/test_real.py runs the real ones)."""

import json

import pytest

from labkit.benchmarks import engines, engines_child
from labkit.benchmarks.serve_servers import LABKIT_FLOAT32, VLLM, Contender
from labkit.engines.compare import EngineRow
from labkit.engines.measure import AGREEMENT_CHATS
from labkit.engines.runners import Answer


def row(engine, policy, batch1, concurrent=None):
    return EngineRow(engine, 1.0, 0.1, batch1, concurrent, None, policy=policy)


TRIES = [
    row("transformers", "PASSIVE", 24.4, 61.3),
    row("llama.cpp", "PASSIVE", 45.7),
    row("labkit server", "PASSIVE", 22.6, 67.8),
    row("transformers", "ACTIVE", 35.0, 70.1),
    row("llama.cpp", "ACTIVE", 150.2),
    row("labkit server", "ACTIVE", 20.0, 40.0),
]


def test_each_engine_keeps_its_fastest_try_at_batch_1_in_the_order_engines_came():
    kept = engines.fastest_rows(TRIES)
    assert [(r.engine, r.policy) for r in kept] == [
        ("transformers", "ACTIVE"),
        ("llama.cpp", "ACTIVE"),
        ("labkit server", "PASSIVE"),
    ]
    assert engines.fastest_rows(TRIES[:3]) == TRIES[:3]  # one policy: every try is kept


def test_the_tries_table_shows_every_policy_and_marks_the_kept_try():
    header, transformers, llama_cpp, server, note = engines.tries_table(TRIES).splitlines()
    assert header.split()[-2:] == ["PASSIVE", "ACTIVE"]
    assert transformers.split()[1:] == ["24.4", "(61.3)", "35.0", "(70.1)*"]
    assert llama_cpp.split()[1:] == ["45.7", "(-)", "150.2", "(-)*"]
    assert server.split()[2:] == ["22.6", "(67.8)*", "20.0", "(40.0)"]
    assert note.startswith("*")


def test_a_bad_engine_policy_or_repeats_is_refused_before_any_process_starts(monkeypatch):
    monkeypatch.setattr(engines, "run_in_child", lambda *a: pytest.fail("a child was started"))
    with pytest.raises(ValueError, match="Unknown in-process engine 'vLLM'.*transformers, labkit, llama.cpp"):
        engines.measure_in_child("vLLM", "ACTIVE")
    with pytest.raises(ValueError, match="PASSIVE, ACTIVE"):
        engines.measure_in_child("labkit", "SPIN")
    with pytest.raises(ValueError, match="repeats"):
        engines.measure_in_child("labkit", "ACTIVE", repeats=0)
    with pytest.raises(ValueError, match="PASSIVE, ACTIVE"):
        engines.measure_started("llama-server", lambda: pytest.fail("a server was started"), None, "spin")
    with pytest.raises(ValueError, match="PASSIVE, ACTIVE"):
        engines.decode_rate_in_child("gemma3-270m", "")


class FakeRunner:
    name = "transformers"

    def __init__(self):
        self.tokenizer = lambda text, add_special_tokens: {"input_ids": [ord(c) for c in text]}

    def answer(self, messages, max_tokens):
        return Answer("ab" * max_tokens, max_tokens, 0.5)

    def ttft(self, messages):
        return 0.05

    def concurrent_rate(self, chats, max_tokens):
        return 123.0

    def top_tokens(self, messages, k):
        return ["The", "L"][:k]


def test_the_child_prints_its_row_with_the_policy_it_ran_under(monkeypatch, capsys):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    monkeypatch.setattr(engines_child, "load_runner", lambda engine: (FakeRunner(), 0.25, 1000))
    assert engines_child.main(["transformers", "--repeats", "1"]) == 0
    printed = EngineRow(**json.loads(capsys.readouterr().out))  # what measure_in_child reads back
    assert (printed.engine, printed.policy, printed.startup_s, printed.rss_bytes) == (
        "transformers",
        "ACTIVE",
        0.25,
        1000,
    )
    assert printed.tokens_per_s == 128.0 and printed.concurrent_tokens_per_s == 123.0  # 64 tokens in 0.5 s
    assert len(printed.greedy_tokens) == len(AGREEMENT_CHATS) and printed.top_tokens == ["The", "L"]


def test_the_decode_child_prints_its_rate_and_policy(monkeypatch, capsys):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setattr(engines_child, "load_model", lambda name: ("model", "tokenizer"))
    monkeypatch.setattr(engines_child, "decode_rate", lambda model, tokenizer, prompt, tokens: 2.0 * tokens)
    engines_child.main(["decode", "--model", "gemma3-270m", "--tokens", "8"])
    assert json.loads(capsys.readouterr().out) == {
        "model": "gemma3-270m",
        "tokens_per_second": 16.0,
        "policy": "PASSIVE",
    }


def test_a_shared_vllm_server_is_measured_where_it_runs_and_nothing_is_started(monkeypatch):
    def must_not_start():
        raise AssertionError("the bench started a server it was handed")

    vllm = Contender(VLLM, "settings", must_not_start)
    labkit = Contender(LABKIT_FLOAT32, "settings", must_not_start)
    monkeypatch.delenv(engines.VLLM_URL_ENV, raising=False)
    assert engines.shared_url(vllm) is None
    with pytest.raises(AssertionError, match="started a server"):
        engines.started(vllm)
    monkeypatch.setenv(engines.VLLM_URL_ENV, "http://127.0.0.1:8123")
    assert engines.shared_url(vllm) == "http://127.0.0.1:8123" and engines.shared_url(labkit) is None
    with engines.started(vllm) as handle:
        assert handle.url == "http://127.0.0.1:8123"
    with pytest.raises(AssertionError, match="started a server"):
        engines.started(labkit)  # only vLLM is ever shared
