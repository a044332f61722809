"""Every server launcher checks its arguments when called: a bad one raises an error that names it, and
no process starts (labkit's own server, llama.cpp's and vLLM's; the engines need not be installed)."""

import math

import pytest

import labkit.launcher as launcher_module
from labkit.core.arguments import check_choice, check_int, check_seconds, check_text
from labkit.engines.llama_server import start_llama_server
from labkit.engines.llamacpp import load_llamacpp
from labkit.engines.vllm import start_vllm_server
from labkit.launcher import require_free_port
from labkit.serving.http.server import start_server

# What each kind of argument must refuse: wrong types, bools posing as numbers, and values out of range.
BAD_PORTS = [-1, 65536, 70000, "8000", 80.5, True, None]
BAD_HOSTS = [None, "", "  ", 127]
BAD_TIMEOUTS = [0, -5, math.nan, math.inf, "30", True, None]
BAD_COUNTS = [0, -2, 1.5, "2", True]  # thread counts, seats: whole numbers of 1 or more
BAD_MODELS = ["no-such-model", "", None, 3, ["smollm2-135m"]]

LAUNCHERS = {
    "start_server": (
        start_server,
        {
            "model": BAD_MODELS,
            "host": BAD_HOSTS,
            "port": BAD_PORTS,
            "timeout": [t for t in BAD_TIMEOUTS if t is not None],  # None: the default, longer with compile
            "max_num_seqs": BAD_COUNTS,
            "max_waiting": [-1, 1.5, "8", True],
            "api_key": ["", 42],
            "optimize": ["fuse,int4", ("warp",), ("int8", "int4")],
            "env": ["OMP_WAIT_POLICY=ACTIVE", {"A": 1}],
            "chunked_prefill": ["yes", 1, None],
            "max_num_batched_tokens": [0, 4, 256.0, "256", True],
            "compile": ["yes", 1, None],
            "n_blocks": BAD_COUNTS,
            "n_window_blocks": BAD_COUNTS,
        },
    ),
    "start_llama_server": (
        start_llama_server,
        {
            "model": BAD_MODELS,
            "host": BAD_HOSTS,
            "port": BAD_PORTS,
            "timeout": BAD_TIMEOUTS,
            "n_threads": BAD_COUNTS,
            "slots": BAD_COUNTS,
            "n_ctx": [0, 8, 2048.0, "2048"],
        },
    ),
    "start_vllm_server": (
        start_vllm_server,
        {
            "model": BAD_MODELS,
            "host": BAD_HOSTS,
            "port": BAD_PORTS,
            "timeout": BAD_TIMEOUTS,
            "max_model_len": [0, 8, 512.0],
            "kv_cache_gib": [0, 1.5, "1"],
            "dtype": ["fp8", None, "int4"],
            "all_cores": ["yes", 1, None],
            "tensor_parallel_size": [0, 1.5, "2", True, 4096],
        },
    ),
    "load_llamacpp": (
        load_llamacpp,
        {
            "model": BAD_MODELS,
            "n_threads": BAD_COUNTS,
            "n_ctx": [0, 8, 2048.0],
            "flash_attn": ["on", 1, None],
            "logits_all": ["yes", 0],
        },
    ),
}
CASES = [
    (name, argument, value)
    for name, (_, bad) in LAUNCHERS.items()
    for argument, values in bad.items()
    for value in values
]


@pytest.fixture
def no_process_may_start(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"a process was started for an invalid call: {args[0] if args else kwargs}")

    monkeypatch.setattr(launcher_module.subprocess, "Popen", refuse)


@pytest.mark.parametrize("name, argument, value", CASES, ids=[f"{n}-{a}={v!r}" for n, a, v in CASES])
def test_a_bad_argument_is_named_before_anything_starts(no_process_may_start, name, argument, value):
    launch = LAUNCHERS[name][0]
    with pytest.raises((ValueError, KeyError, TypeError)) as raised:
        launch(**{argument: value})
    message = str(raised.value).lower()
    named = "model" if argument == "model" else argument
    assert named in message, f"the error for {argument}={value!r} does not name it: {raised.value}"


def test_the_port_check_guards_every_caller_of_require_free_port():
    with pytest.raises(ValueError, match="port must be a whole number from 0 to 65535, got 70000"):
        require_free_port("127.0.0.1", 70000)
    with pytest.raises(ValueError, match="host must be a non-empty string"):
        require_free_port(None, 0)
    assert 0 < require_free_port("127.0.0.1", 0) < 65536


def test_the_checks_say_what_is_allowed():
    assert check_int("n", 3, minimum=1) == 3 and check_seconds("t", 2) == 2.0
    assert check_text("host", "::1", example="'::1'") == "::1" and check_choice("d", "a", ("a", "b")) == "a"
    with pytest.raises(ValueError, match=r"n must be a whole number of 1 or more, got True"):
        check_int("n", True, minimum=1)
    with pytest.raises(ValueError, match=r"n must be a whole number of at most 8, got 9"):
        check_int("n", 9, maximum=8)
    with pytest.raises(
        ValueError,
        match=r"^n_layers must be a whole number from 1 to 30 \(the model's layers\), "
        r"got 31\.$",
    ):
        check_int("n_layers", 31, minimum=1, maximum=30, note="the model's layers")
    with pytest.raises(ValueError, match=r"t must be a number of seconds above 0, got -1"):
        check_seconds("t", -1)
    with pytest.raises(ValueError, match=r"d must be one of 'a', 'b', got 'c'"):
        check_choice("d", "c", ("a", "b"))
