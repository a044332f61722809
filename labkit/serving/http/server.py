"""Starting the server: `python -m labkit serve ...` in a terminal, `start_server(...)` from Python.

`start_server` runs `python -m labkit serve` as a background process (labkit.serving.http.launcher), waits
until `/health` answers, and returns a handle with its URL and `stop()`, so a notebook keeps working while
it serves.

    >>> server = start_server("smollm2-135m", max_num_seqs=8)
    >>> server.url
    'http://127.0.0.1:54321'
    >>> server.stop()

It binds 127.0.0.1 unless told otherwise; on any other address it warns that there is no
authentication unless an API key is given (then every request needs `Authorization: Bearer KEY`).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from collections.abc import Mapping, Sequence

from labkit.core.arguments import check_int, check_seconds, check_text
from labkit.serving.http.launcher import ServerHandle, check_address, launch, require_free_port

DEFAULT_PORT = 8000
DEFAULT_MAX_NUM_SEQS = 8
DEFAULT_MAX_WAITING = 64
START_TIMEOUT_S = 180.0  # loading the model from the cache takes seconds; building the cache, a minute


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, api_key: str | None) -> str | None:
    """The warning to print when the server is reachable from other machines without a key (else None).

        >>> exposure_warning("127.0.0.1", None) is None
        True
    """
    if is_loopback(host) or api_key:
        return None
    return (f"WARNING: listening on {host} with NO authentication: anyone who can reach this machine can use "
            "the model. Pass --api-key KEY to require 'Authorization: Bearer KEY'.")


STEP_HISTORY = 10_000  # the server's engine keeps only its latest steps' metrics


def create_app(model: str = "smollm2-135m", max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
               max_waiting: int = DEFAULT_MAX_WAITING, api_key: str | None = None, steps: Sequence[str] = ()):
    """Load the model (labkit's Llama), apply labkit.fast `steps` to it, start its engine thread, and build
    the app around it. steps=("fuse", "int4"): 4-bit weights; the engine decoded 8 requests of 32 tokens at
    once at 85.0 tokens/s against float32's 58.7 (2-core AMD EPYC, idle, median of 3)."""
    from labkit.fast.optimize import optimize
    from labkit.models.loading import load_model
    from labkit.serving.engine import Engine
    from labkit.serving.http.app import build_app
    from labkit.serving.http.engine_thread import EngineThread
    from labkit.serving.http.model_service import ModelService

    llama, tokenizer = load_model(model, impl="labkit")
    llama = optimize(llama, steps) if steps else llama
    engine = Engine(llama, tokenizer, max_num_seqs=max_num_seqs, max_waiting=max_waiting, step_history=STEP_HISTORY)
    engine_thread = EngineThread(engine)
    engine_thread.start()
    return build_app(ModelService(model, llama, tokenizer, engine_thread), api_key)


def serve(model: str, host: str, port: int, max_num_seqs: int, max_waiting: int, api_key: str | None,
          steps: Sequence[str] = ()) -> None:
    """Serve until interrupted (what `python -m labkit serve` runs)."""
    import uvicorn

    warning = exposure_warning(host, api_key)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    app = create_app(model, max_num_seqs, max_waiting, api_key, steps)
    print(f"labkit serving {model}{' (' + ', '.join(steps) + ')' if steps else ''} at http://{host}:{port} (Ollama: /api/*, OpenAI: /v1/*, /health, /metrics)",
          flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=5)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m labkit serve",
                                     description="Serve a model over Ollama's and OpenAI's HTTP APIs.")
    parser.add_argument("--model", default="smollm2-135m", help="an embedded model name or a local folder")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    parser.add_argument("--max-num-seqs", type=int, default=DEFAULT_MAX_NUM_SEQS,
                        help="requests decoded together in one batch")
    parser.add_argument("--max-waiting", type=int, default=DEFAULT_MAX_WAITING,
                        help="requests that may wait for a slot; more get 503 at once")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on every request")
    parser.add_argument("--optimize", default="", metavar="STEPS",
                        help="labkit.fast steps for the model, comma-separated, e.g. fuse,int4 (default: none, float32)")
    args = parser.parse_args(argv)
    if args.max_num_seqs < 1 or args.max_waiting < 0 or not 0 <= args.port < 65536:
        parser.error("--max-num-seqs must be >= 1, --max-waiting >= 0 and --port in [0, 65535].")
    from labkit.fast.optimize import check_steps  # here, not at the top: it loads torch

    try:
        args.optimize = check_steps([step.strip() for step in args.optimize.split(",") if step.strip()])
    except ValueError as error:
        parser.error(f"--optimize: {error}")
    return args


def main(argv: list[str] | None = None) -> None:
    """`python -m labkit serve --model smollm2-135m [--host H] [--port P] [--max-num-seqs N] [--api-key K]`."""
    args = parse_args(argv)
    serve(args.model, args.host, args.port, args.max_num_seqs, args.max_waiting, args.api_key, args.optimize)


def start_server(model: str = "smollm2-135m", host: str = "127.0.0.1", port: int = 0,
                 max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, api_key: str | None = None,
                 max_waiting: int = DEFAULT_MAX_WAITING, timeout: float = START_TIMEOUT_S,
                 optimize: Sequence[str] = (), env: Mapping[str, str] | None = None) -> ServerHandle:
    """Start `python -m labkit serve` in the background (port 0: a free one) and wait until it answers.
    Every argument is checked first: a bad one raises a ValueError naming it, and no process starts.
    env: variables set for the server process on top of this one's, e.g. {"OMP_WAIT_POLICY": "ACTIVE"}.

        >>> with start_server(max_num_seqs=4) as server:
        ...     print(httpx.get(server.url + "/health").json()["status"])
        ok
    """
    from labkit.fast.optimize import check_steps  # here, not at the top: they load torch
    from labkit.models.loading import check_model_source

    check_model_source(model)
    check_address(host, port)
    check_int("max_num_seqs", max_num_seqs, minimum=1)
    check_int("max_waiting", max_waiting, minimum=0)
    check_seconds("timeout", timeout)
    if api_key is not None:
        check_text("api_key", api_key, example="'secret' (or None: no key)")
    if env is not None and not (isinstance(env, Mapping) and all(isinstance(v, str) for v in env.values())):
        raise ValueError(f"env must map variable names to strings, e.g. {{'OMP_WAIT_POLICY': 'ACTIVE'}}, got {env!r}.")
    try:
        steps = check_steps(optimize)
    except ValueError as error:
        raise ValueError(f"optimize: {error}") from None
    port = require_free_port(host, port)
    command = [sys.executable, "-m", "labkit", "serve", "--model", model, "--host", host, "--port", str(port),
               "--max-num-seqs", str(max_num_seqs), "--max-waiting", str(max_waiting)]
    command += ["--api-key", api_key] if api_key else []
    command += ["--optimize", ",".join(steps)] if steps else []
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    return launch(command, "labkit-server-", url, timeout, env={**os.environ, **(env or {})})


