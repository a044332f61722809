"""Starting the server: `python -m labkit serve ...` in a terminal, `start_server(...)` from Python.

`start_server` runs `python -m labkit serve` as a background process, waits until `/health` answers,
and returns a handle with its URL and `stop()`, so a notebook keeps working while it serves.

    >>> server = start_server("smollm2-135m", max_num_seqs=8)
    >>> server.url
    'http://127.0.0.1:54321'
    >>> server.stop()

It binds 127.0.0.1 unless told otherwise; on any other address it warns that there is no
authentication unless an API key is given (then every request needs `Authorization: Bearer KEY`).
"""

from __future__ import annotations

import argparse
import atexit
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

from labkit.core.arguments import check_int, check_seconds, check_text

DEFAULT_PORT = 8000
DEFAULT_MAX_NUM_SEQS = 8
DEFAULT_MAX_WAITING = 64
START_TIMEOUT_S = 180.0  # loading the model from the cache takes seconds; building the cache, a minute


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def require_free_port(host: str, port: int) -> int:
    """`port` if nobody listens on it (0: pick a free one); else a ValueError that says what to do."""
    check_address(host, port)
    if port == 0:
        return free_port(host)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        if os.name == "posix":  # as the servers bind (uvicorn): a stopped server's TIME_WAIT connections
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # do not block; a listener still does
        try:
            probe.bind((host, port))
        except OSError:
            raise ValueError(f"Port {port} on {host} is already in use (another server still running?). "
                             "Stop it, pick another port, or pass port=0 for a free one.") from None
    return port


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


class ServerHandle:
    """A server running in a background process: its `url`, its `log` file, and `stop()`.

    Every handle is also stopped when the Python process exits, so a notebook whose cell failed
    after starting a server does not leave it running. A process started in its own session
    (`start_new_session=True`, as engines that spawn workers are) is stopped with its whole group.
    """

    def __init__(self, process: subprocess.Popen, url: str, log: Path):
        self.process, self.url, self.log = process, url, log
        self.group = process.pid if process_group(process.pid) == process.pid else None
        RUNNING_SERVERS.add(self)

    def is_running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the process (gracefully, then by force) and wait for it; then end any worker left in its
        group and wait until none is alive, so that a caller finds its memory and port free on return."""
        if self.is_running():
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait(timeout)
        if self.group is not None:
            kill_group(self.group, signal.SIGKILL)
            wait_until_group_ends(self.group, timeout)

    def _signal(self, signum: int) -> None:
        if self.group is not None:
            kill_group(self.group, signum)
        else:
            self.process.send_signal(signum)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ServerHandle({self.url}, {'running' if self.is_running() else 'stopped'})"


def process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def kill_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass


def live_group_members(group: int) -> list[psutil.Process]:
    """The processes of process group `group` still running (a zombie holds no memory or port: left out)."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == group and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return members


def wait_until_group_ends(group: int, timeout: float) -> None:
    """Wait (at most `timeout` seconds) until no process of `group` is alive: a killed worker that frees
    gigabytes takes a moment to exit after SIGKILL is sent."""
    deadline = time.monotonic() + timeout
    while live_group_members(group) and time.monotonic() < deadline:
        time.sleep(0.05)


def die_with_parent() -> None:
    """In a child process before it runs: on Linux, ask the kernel to end it when its parent dies.

    A notebook kernel that is killed (not shut down) runs no atexit hooks; without this, an engine server
    started in its own session would keep its port and gigabytes of memory. Elsewhere it does nothing.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


RUNNING_SERVERS: weakref.WeakSet[ServerHandle] = weakref.WeakSet()


@atexit.register
def stop_all_servers() -> None:
    """Stop every server this Python process started (runs at exit; safe to call any time)."""
    for handle in list(RUNNING_SERVERS):
        handle.stop(timeout=5.0)


def start_server(model: str = "smollm2-135m", host: str = "127.0.0.1", port: int = 0,
                 max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, api_key: str | None = None,
                 max_waiting: int = DEFAULT_MAX_WAITING, timeout: float = START_TIMEOUT_S,
                 optimize: Sequence[str] = ()) -> ServerHandle:
    """Start `python -m labkit serve` in the background (port 0: a free one) and wait until it answers.
    Every argument is checked first: a bad one raises a ValueError naming it, and no process starts.

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
    return launch(command, "labkit-server-", url, timeout)


def check_address(host: object, port: object) -> None:
    """A ValueError unless host is a non-empty string and port a whole number from 0 to 65535 (0: any free one)."""
    check_text("host", host, example="'127.0.0.1'")
    check_int("port", port, minimum=0, maximum=65535)


def launch(command: list[str], log_prefix: str, url: str, timeout: float, health_path: str = "/health",
           env: dict[str, str] | None = None, own_session: bool = False,
           explain: Callable[[str, Path], str] | None = None) -> ServerHandle:
    """Run a server's `command` in the background, its output in a new log file, and return its handle once
    `url + health_path` answers 200. own_session: in a process group of its own, so that stop() also ends
    the workers it spawns. If it dies or times out first, it is stopped and a RuntimeError carries the log's
    end (passed through explain(message, log) when given).

        >>> launch([sys.executable, "-m", "labkit", "serve", "--port", "8001"], "labkit-", "http://127.0.0.1:8001", 60)
    """
    log = Path(tempfile.mkstemp(prefix=log_prefix, suffix=".log")[1])
    with open(log, "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT,
                                   env=os.environ.copy() if env is None else env,
                                   start_new_session=own_session, preexec_fn=die_with_parent)
    handle = ServerHandle(process, url, log)
    try:
        wait_until_healthy(handle, timeout, path=health_path)
    except RuntimeError as error:
        raise RuntimeError(explain(str(error), log) if explain else str(error)) from None
    return handle


def wait_until_healthy(handle: ServerHandle, timeout: float, path: str = "/health") -> None:
    """Poll `path` until it answers 200; raise RuntimeError (with the log's end) if the process dies or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not handle.is_running():
            handle.stop()  # any worker it left in its group
            raise RuntimeError(f"The server exited with code {handle.process.returncode}:\n{tail(handle.log)}")
        try:
            with urllib.request.urlopen(handle.url + path, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    handle.stop()
    raise RuntimeError(f"The server did not answer within {timeout:.0f} s:\n{tail(handle.log)}")


def tail(path: Path, n_chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-n_chars:]
