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
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import fields

from labkit.core.arguments import check_seconds, check_text
from labkit.launcher import ServerHandle, check_address, launch, require_free_port
from labkit.serving.http.server_options import DEFAULT_MAX_NUM_SEQS, DEFAULT_MAX_WAITING, ServerOptions

DEFAULT_PORT = 8000
START_TIMEOUT_S = 180.0  # loading the model from the cache takes seconds; building the cache, a minute
COMPILE_TIMEOUT_S = 600.0  # compiling the decode step: 10-40 s per batch size on 2 cores, seconds once cached


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
    return (
        f"WARNING: listening on {host} with NO authentication: anyone who can reach this machine can use "
        "the model. Pass --api-key KEY to require 'Authorization: Bearer KEY'."
    )


STEP_HISTORY = 10_000  # the server's engine keeps only its latest steps' metrics


def create_app(options: ServerOptions = ServerOptions(), api_key: str | None = None):
    """Load the model (labkit's Llama), apply its labkit.fast steps, build its engine (compiling its decode
    step if asked), start its engine thread, and build the app around it. The main thread keeps one torch
    thread; the model is built on a thread of its own and stepped by the engine thread, both with the
    process's torch threads (labkit.serving.http.openmp_team says why). optimize=("fuse", "int4"): 4-bit
    weights; the engine decoded 8 requests of 32 tokens at once at 85.0 tokens/s against float32's 58.7
    (2-core AMD EPYC, idle, median of 3)."""
    import torch

    from labkit.serving.http.app import build_app
    from labkit.serving.http.engine_thread import EngineThread
    from labkit.serving.http.model_service import ModelService
    from labkit.serving.http.openmp_team import built_on_a_thread

    threads = torch.get_num_threads()
    # this (the main) thread starts no OpenMP team: the engine thread's is the only one
    torch.set_num_threads(1)
    llama, tokenizer, engine = built_on_a_thread(lambda: build_engine(options), threads)
    engine_thread = EngineThread(engine, threads=threads)
    engine_thread.start()
    return build_app(ModelService(options.model, llama, tokenizer, engine_thread), api_key)


class EngineRefused(ValueError):
    """The engine refused options that only the loaded model can rule out (n_window_blocks for a model
    without sliding-window layers); `parameter` names the option (None: no one option)."""

    def __init__(self, message: str, parameter: str | None):
        super().__init__(message)
        self.parameter = parameter

    def command_line(self) -> str:
        """The message as `python -m labkit serve` says it, naming the option by its flag.

        >>> EngineRefused("n_window_blocks=8 sizes ...", "n_window_blocks").command_line()
        '--n-window-blocks: n_window_blocks=8 sizes ...'
        """
        flag = (
            "--" + self.parameter.replace("_", "-") if self.parameter else "the engine refused these options"
        )
        return f"{flag}: {self}"


def refused_option_name(message: str) -> str | None:
    """The ServerOptions field an engine error starts with ("n_window_blocks=8 sizes ..."), else None."""
    first = re.match(r"\w+", message)
    names = {field.name for field in fields(ServerOptions)}
    return first.group() if first and first.group() in names else None


def build_engine(options: ServerOptions):
    """(model, tokenizer, engine) as `options` ask: labkit's Llama or Gemma3 with its labkit.fast steps, and its
    Engine. Options the model or engine refuses raise EngineRefused (a ValueError naming the option)."""
    from labkit.fast.optimize import optimize
    from labkit.models.loading import load_model
    from labkit.serving.engine import Engine

    llama, tokenizer = load_model(options.model, impl="labkit")
    try:
        llama = optimize(llama, options.optimize) if options.optimize else llama
    except ValueError as error:  # a step this model does not take (fuse on a Gemma3)
        raise EngineRefused(str(error), "optimize") from error
    try:
        engine = Engine(
            llama,
            tokenizer,
            max_num_seqs=options.max_num_seqs,
            max_waiting=options.max_waiting,
            chunked_prefill=options.chunked_prefill,
            max_num_batched_tokens=options.max_num_batched_tokens,
            step_history=STEP_HISTORY,
            compile_decode=options.compile,
            **({} if options.block_size is None else {"block_size": options.block_size}),
            n_blocks=options.n_blocks,
            n_window_blocks=options.n_window_blocks,
            speculation=options.speculation(),
        )
    except (ValueError, TypeError) as error:  # the engine checks its options before it allocates its pools
        raise EngineRefused(str(error), refused_option_name(str(error))) from error
    return llama, tokenizer, engine


def serve(options: ServerOptions, host: str, port: int, api_key: str | None) -> None:
    """Serve until interrupted (what `python -m labkit serve` runs)."""
    import uvicorn

    from labkit.fast.allocator import keep_freed_memory

    keep_freed_memory()  # a step's freed buffers stay in the heap for the next (labkit.fast.allocator)
    warning = exposure_warning(host, api_key)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    app = create_app(options, api_key)
    steps = f" ({', '.join(options.optimize)})" if options.optimize else ""
    engine = app.state.service.engine_thread.engine
    print(
        f"labkit serving {options.model}{steps}, {options.scheduling()}, decode step {engine.step_description()}, "
        f"at http://{host}:{port} (Ollama: /api/*, OpenAI: /v1/*, /health, /metrics)",
        flush=True,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=5)


def argument_parser() -> argparse.ArgumentParser:
    """`python -m labkit serve`'s options, each with its default and its help line."""
    parser = argparse.ArgumentParser(
        prog="python -m labkit serve", description="Serve a model over Ollama's and OpenAI's HTTP APIs."
    )
    parser.add_argument("--model", default="smollm2-135m", help="an embedded model name or a local folder")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=DEFAULT_MAX_NUM_SEQS,
        help="requests decoded together in one batch",
    )
    parser.add_argument(
        "--max-waiting",
        type=int,
        default=DEFAULT_MAX_WAITING,
        help="requests that may wait for a slot; more get 503 at once",
    )
    parser.add_argument(
        "--api-key", default=None, help="require 'Authorization: Bearer KEY' on every request"
    )
    parser.add_argument(
        "--optimize",
        default="",
        metavar="STEPS",
        help="labkit.fast steps for the model, comma-separated, e.g. fuse,q4_1 (the fastest; default: "
        "none, float32)",
    )
    parser.add_argument(
        "--chunked-prefill",
        action="store_true",
        help="feed prompts in chunks beside the running decodes (vLLM V1's scheduling)",
    )
    parser.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        metavar="N",
        help="tokens per step (default: 256 with --chunked-prefill, else a whole context)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="compile the decode step for batch sizes up to --max-num-seqs at start-up (minutes "
        "on 2 cores the first time; cached on disk)",
    )
    add_pool_arguments(parser)
    return parser


def add_pool_arguments(parser: argparse.ArgumentParser) -> None:
    """The engine's KV pools and speculation, on `python -m labkit serve`'s parser."""
    parser.add_argument(
        "--block-size",
        type=int,
        default=None,
        metavar="B",
        help="tokens per KV-cache block (default: 16); the prefix cache reuses whole blocks, so smaller "
        "blocks find more of a shared prompt (vLLM's --block-size)",
    )
    parser.add_argument(
        "--n-blocks",
        type=int,
        default=None,
        metavar="N",
        help="KV-cache blocks of --block-size tokens in the pool, a Gemma3's global layers' (default: 1024 "
        "tokens a sequence, or the context if shorter, times --max-num-seqs)",
    )
    parser.add_argument(
        "--n-window-blocks",
        type=int,
        default=None,
        metavar="N",
        help="blocks of a Gemma3's sliding-window layers' pool (default: what its sequences and tokens per "
        "step can hold at once, at most --n-blocks); only for a model with sliding-window layers",
    )
    parser.add_argument(
        "--speculative-tokens",
        type=int,
        default=None,
        metavar="K",
        help="speculative decoding by prompt lookup (n-gram, as vLLM's ngram and llama-server's "
        "ngram-simple): at most K draft tokens a request a step, fewer where they do not pay "
        "(default: off); a request may lower it with speculative.n_max",
    )
    parser.add_argument(
        "--draft-exit-layer",
        type=int,
        default=None,
        metavar="L",
        help="with --speculative-tokens: draft with the model's own first L layers and its head (early "
        "exit) instead of prompt lookup; a Llama's only (SmolLM2)",
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked; `.options` holds the ServerOptions it asks for.

    >>> parse_args(["--max-num-seqs", "4", "--optimize", "fuse, q4_1"]).options.optimize
    ('fuse', 'q4_1')
    """
    parser = argument_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.port < 65536:
        parser.error("--port must be in [0, 65535].")
    options = ServerOptions(
        args.model,
        args.max_num_seqs,
        args.max_waiting,
        tuple(step.strip() for step in args.optimize.split(",") if step.strip()),
        args.chunked_prefill,
        args.max_num_batched_tokens,
        args.compile,
        block_size=args.block_size,
        n_blocks=args.n_blocks,
        n_window_blocks=args.n_window_blocks,
        speculative_tokens=args.speculative_tokens,
        draft_exit_layer=args.draft_exit_layer,
    )
    try:
        args.options = options.check()
    except (ValueError, TypeError, KeyError) as error:
        parser.error(str(error).strip("'\""))
    args.optimize = args.options.optimize
    return args


def main(argv: list[str] | None = None) -> None:
    """`python -m labkit serve --model smollm2-135m [--host H] [--port P] [--max-num-seqs N] [--chunked-prefill]`.
    Options the engine refuses once the model is loaded (--n-window-blocks for a model without sliding-window
    layers) end it as a bad option does, naming the option (exit status 2), before it serves."""
    args = parse_args(argv)
    try:
        serve(args.options, args.host, args.port, args.api_key)
    except EngineRefused as error:
        argument_parser().error(error.command_line())


def start_server(
    model: str = "smollm2-135m",
    host: str = "127.0.0.1",
    port: int = 0,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    api_key: str | None = None,
    max_waiting: int = DEFAULT_MAX_WAITING,
    timeout: float | None = None,
    optimize: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    chunked_prefill: bool = False,
    max_num_batched_tokens: int | None = None,
    compile: bool = False,
    block_size: int | None = None,
    n_blocks: int | None = None,
    n_window_blocks: int | None = None,
    speculative_tokens: int | None = None,
    draft_exit_layer: int | None = None,
) -> ServerHandle:
    """Start `python -m labkit serve` in the background (port 0: a free one) and wait until it answers.
    Every argument is checked first: a bad one raises an error naming it, and no process starts.
    env: variables set for the server process on top of this one's, e.g. {"OMP_WAIT_POLICY": "ACTIVE"}.
    chunked_prefill, max_num_batched_tokens: the engine's scheduling; compile: its decode step compiled;
    block_size, n_blocks, n_window_blocks: its KV pools, None the engine's defaults (ServerOptions). speculative_tokens:
    prompt-lookup speculation, at most that many draft tokens a step (None: off); draft_exit_layer: draft
    with the model's first that many layers instead. timeout: seconds to
    wait until it answers (None: START_TIMEOUT_S, plus COMPILE_TIMEOUT_S with compile).

        >>> with start_server(max_num_seqs=4, chunked_prefill=True) as server:
        ...     print(httpx.get(server.url + "/health").json()["status"])
        ok
    """
    options = ServerOptions(
        model,
        max_num_seqs,
        max_waiting,
        optimize,
        chunked_prefill,
        max_num_batched_tokens,
        compile,
        block_size=block_size,
        n_blocks=n_blocks,
        n_window_blocks=n_window_blocks,
        speculative_tokens=speculative_tokens,
        draft_exit_layer=draft_exit_layer,
    ).check()
    check_address(host, port)
    if timeout is None:
        timeout = START_TIMEOUT_S + (COMPILE_TIMEOUT_S if compile else 0.0)
    check_seconds("timeout", timeout)
    if api_key is not None:
        check_text("api_key", api_key, example="'secret' (or None: no key)")
    if env is not None and not (isinstance(env, Mapping) and all(isinstance(v, str) for v in env.values())):
        raise ValueError(
            f"env must map variable names to strings, e.g. {{'OMP_WAIT_POLICY': 'ACTIVE'}}, got {env!r}."
        )
    port = require_free_port(host, port)
    command = [sys.executable, "-m", "labkit", "serve", *options.argv(), "--host", host, "--port", str(port)]
    command += ["--api-key", api_key] if api_key else []
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    return launch(command, "labkit-server-", url, timeout, env={**os.environ, **(env or {})})
