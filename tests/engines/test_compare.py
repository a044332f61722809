"""The side-by-side measures of notebook 12 and the engines' clear errors (no engine needs to be installed)."""

import socket
from pathlib import Path

import pytest

from labkit.engines import EngineNotInstalled, start_llama_server, start_vllm_server
from labkit.engines.compare import EngineRow, greedy_agreement, side_by_side, topk_agreement
from labkit.engines.install import require_llamacpp
from labkit.engines.vllm import tensor_parallel_env, vllm_server_command
from labkit.launcher import require_free_port


def test_greedy_agreement_counts_the_shared_start_only():
    assert greedy_agreement([1, 2, 3, 4], [1, 2, 3, 4]) == 4
    assert greedy_agreement([1, 2, 3, 4], [1, 9, 3, 4]) == 1  # later matches follow different texts
    assert greedy_agreement([7, 8], [8, 7]) == 0
    assert greedy_agreement(list(range(40)), list(range(40)), n=32) == 32
    assert greedy_agreement([1, 2, 3], [1, 2]) == 2  # one answer ended early


def test_topk_agreement_is_the_shared_share_of_the_reference():
    # order aside
    assert topk_agreement(["The", "L", "La", "Al", "Le"], ["L", "The", "La", "Le", "Al"]) == 1.0
    assert topk_agreement([1, 2, 3, 4, 5], [1, 2, 6, 7, 8]) == 0.4
    with pytest.raises(ValueError, match="reference_top is empty"):
        topk_agreement([], [1])


def row(name, greedy, top, concurrent=10.0, rss=5e8):
    return EngineRow(name, 1.0, 0.25, 20.0, concurrent, rss, greedy, top)


def test_side_by_side_measures_against_the_reference_and_marks_what_does_not_apply():
    reference = row("transformers", [[1, 2, 3], [4, 5]], ["a", "b", "c", "d", "e"])
    other = row("llama.cpp", [[1, 2, 9], [4, 5]], ["a", "b", "c", "x", "y"], concurrent=None, rss=None)
    table = side_by_side([reference, other]).splitlines()
    assert "transformers" in table[2] and "3/3 2/2" in table[2] and "100%" in table[2]
    llama = table[3]
    assert "2/3 2/2" in llama and "60%" in llama
    assert llama.split()[4] == "-" and llama.split()[5] == "-"  # no batching API, no RSS given


def test_a_port_in_use_is_refused_with_what_to_do():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ValueError, match=f"Port {port} .* already in use.*port=0"):
            require_free_port("127.0.0.1", port)
    assert require_free_port("127.0.0.1", 0) > 0


def test_a_missing_vllm_says_to_run_make_engines(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_ENGINES", str(tmp_path))  # an engines folder with nothing installed
    with pytest.raises(EngineNotInstalled, match="make engines"):
        start_vllm_server()


def test_a_tensor_parallel_vllm_binds_one_core_per_rank_and_needs_heads_it_divides(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_ENGINES", str(tmp_path))  # nothing installed: a check that passed would say so
    assert tensor_parallel_env(2) == {"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    command = vllm_server_command(Path("python"), Path("folder"), "m", "127.0.0.1", 8000, 2048, "float32", 2)
    assert command[-4:] == ["--tensor-parallel-size", "2", "--distributed-executor-backend", "mp"]
    assert "--tensor-parallel-size" not in vllm_server_command(
        Path("p"), Path("f"), "m", "h", 1, 16, "float32"
    )
    with pytest.raises(ValueError, match="divide the model's 9 attention heads, got 2"):
        start_vllm_server("smollm2-135m", tensor_parallel_size=2)  # SmolLM2: 9 heads
    with pytest.raises(ValueError, match="all_cores and tensor_parallel_size"):
        start_vllm_server(all_cores=True, tensor_parallel_size=2)


def test_a_missing_llamacpp_says_to_run_make_engines(monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llama_cpp" else real_find_spec(name, *a),
    )
    with pytest.raises(EngineNotInstalled, match="llama-cpp-python 0.3.36.*make engines"):
        require_llamacpp()


def test_a_missing_llama_server_says_to_run_make_engines(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_ENGINES", str(tmp_path))  # an engines folder with nothing built
    with pytest.raises(EngineNotInstalled, match="llama-server is missing.*make engines"):
        start_llama_server()


def test_side_by_side_names_each_rows_wait_policy_when_rows_recorded_one():
    reference = row("transformers", [[1, 2]], ["a"])
    reference.policy = "ACTIVE"
    server = row("labkit server", [[1, 2]], None)
    server.policy = "PASSIVE"
    header, _, first, second = side_by_side([reference, server]).splitlines()
    assert header.split()[:2] == ["engine", "policy"]
    assert first.split()[1] == "ACTIVE" and second.split()[2] == "PASSIVE"
    assert "policy" not in side_by_side([row("transformers", [[1]], None)])  # none recorded: no column


def test_a_llama_server_states_and_sets_its_wait_policy(monkeypatch):
    from labkit.engines import LlamaServerSettings

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    default = LlamaServerSettings("smollm2-135m", slots=8, threads=2)
    assert (
        default.describe().endswith("OpenMP default wait") and "OMP_WAIT_POLICY" not in default.environment()
    )
    active = LlamaServerSettings("smollm2-135m", slots=8, threads=2, wait_policy="ACTIVE")
    assert (
        active.describe().endswith("OMP_WAIT_POLICY=ACTIVE")
        and active.environment()["OMP_WAIT_POLICY"] == "ACTIVE"
    )


def test_an_unknown_wait_policy_is_refused_before_a_server_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_ENGINES", str(tmp_path))  # nothing installed: a check that passed would say so
    with pytest.raises(ValueError, match="OpenMP wait policy 'spin'.*PASSIVE, ACTIVE"):
        start_llama_server(wait_policy="spin")
    with pytest.raises(ValueError, match="OpenMP wait policy 'spin'.*PASSIVE, ACTIVE"):
        start_vllm_server(wait_policy="spin")


def test_a_timed_load_counts_the_load_not_the_warm_up_and_the_memory_both_add(monkeypatch):

    import labkit.timing
    from labkit.engines import measure as measure_module

    # a fake clock and memory: no timing (timed_load reads labkit.timing's clock, through time_once)
    clock, memory, calls = iter([10.0, 12.5, 99.0]), iter([100, 700]), []
    monkeypatch.setattr(labkit.timing, "clock", lambda: next(clock))
    monkeypatch.setattr(measure_module, "current_memory_bytes", lambda: next(memory))
    loaded, seconds, rss = measure_module.timed_load(
        lambda: calls.append("load") or "model", lambda model: calls.append(f"warm {model}")
    )
    assert loaded == "model" and calls == ["load", "warm model"]
    assert seconds == 2.5 and rss == 600  # the clock is read around the load only; memory after the warm-up


def test_decode_rate_times_the_new_tokens_after_the_first(tiny, tokenizer, monkeypatch):
    from types import SimpleNamespace

    from labkit.engines import measure as measure_module

    clock = iter(range(100))
    monkeypatch.setattr(measure_module, "time", SimpleNamespace(perf_counter=lambda: float(next(clock))))
    # one clock read before the loop, one at the first new token, one after the last: 8 more tokens in 1 tick
    assert measure_module.decode_rate(tiny, tokenizer, "Hello", new_tokens=8) == 8.0


def test_the_first_tokens_alternatives_are_read_in_the_completions_shape_and_in_llama_servers_chat_shape():
    from openai.types.completion_choice import Logprobs

    from labkit.engines.server_runner import first_top_logprobs

    completions = Logprobs(tokens=[" Paris"], top_logprobs=[{" Paris": -0.26, " the": -2.7}])
    chat_shape = Logprobs.model_validate(
        {
            "content": [
                {
                    "token": " Paris",
                    "logprob": -0.25,
                    "top_logprobs": [
                        {"token": " Paris", "logprob": -0.25},
                        {"token": " the", "logprob": -2.8},
                    ],
                }
            ]
        }
    )
    assert first_top_logprobs(completions) == {" Paris": -0.26, " the": -2.7}
    assert first_top_logprobs(chat_shape) == {" Paris": -0.25, " the": -2.8}
    assert first_top_logprobs(Logprobs()) == {}
