"""Starting a server in its own process, waiting until it answers, and stopping it with every worker it spawned.

One launcher for every server of the course: labkit's own (`start_server`), llama.cpp's `llama-server` and
vLLM's. `launch` runs the command with its output in a log file, polls a health URL until it answers 200,
and returns a `ServerHandle`; `stop()` ends the process (and, started in a session of its own, its whole
process group) and waits until its port and memory are free. Every handle is stopped when Python exits,
and on Linux a server also dies with the process that started it.

    >>> port = require_free_port("127.0.0.1", 0)
    >>> with launch(["llama-server", "--port", str(port), ...], "llama-server-", f"http://127.0.0.1:{port}", 60) as server:
    ...     httpx.get(server.url + "/health").status_code
    200
"""

from __future__ import annotations

import atexit
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
from collections.abc import Callable
from pathlib import Path

import psutil

from labkit.core.arguments import check_int, check_text
from labkit.core.doors import check_record


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
            raise ValueError(
                f"Port {port} on {host} is already in use (another server still running?). "
                "Stop it, pick another port, or pass port=0 for a free one."
            ) from None
    return port


class ServerHandle:
    """A server running in a background process: its `url`, its `log` file, and `stop()`.

    Every handle is also stopped when the Python process exits, so a notebook whose cell failed
    after starting a server does not leave it running. A process started in its own session
    (`start_new_session=True`, as engines that spawn workers are) is stopped with its whole group.
    """

    def __init__(
        self,
        process: subprocess.Popen,
        url: str,
        log: Path,
        on_stop: Callable[[], None] | None = None,
        sweep_shared_memory: bool = False,
    ):
        check_record("process", process, "a started process (subprocess.Popen)", has=("pid", "poll"))
        self.process, self.url, self.log = process, url, log
        self.on_stop = on_stop  # run once, after every process has ended: what the server leaves behind
        self.sweep_shared_memory = sweep_shared_memory  # unlink the group's /dev/shm files it left behind
        self.group = process.pid if process_group(process.pid) == process.pid else None
        RUNNING_SERVERS.add(self)

    def is_running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the process (gracefully, then by force) and wait for it; then end any worker left in its
        group and wait until none is alive, so that a caller finds its memory and port free on return. With
        sweep_shared_memory, the /dev/shm files its processes had mapped just before and that outlive them
        are removed."""
        sweep = self.sweep_shared_memory and self.group is not None
        mapped = shared_memory_of(self.group) if sweep else set()
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
        for segment in mapped:
            segment.unlink(missing_ok=True)
        if self.on_stop is not None:
            self.on_stop, clean_up = None, self.on_stop
            clean_up()

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


def shared_memory_of(group: int) -> set[Path]:
    """The /dev/shm files (POSIX shared memory: Python's multiprocessing segments psm_<id>, an engine's
    all-reduce buffers) that the live processes of process group `group` have mapped, read from their
    /proc/<pid>/maps. A segment already unlinked (" (deleted)") is left out.

        >>> shared_memory_of(server.group)
        {PosixPath('/dev/shm/psm_1f2e3d4c')}
    """
    found = set()
    for process in live_group_members(group):
        try:
            maps = Path(f"/proc/{process.pid}/maps").read_text()
        except OSError:  # it ended meanwhile, or is not ours to read
            continue
        for line in maps.splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/dev/shm/") and not fields[5].endswith("(deleted)"):
                found.add(Path(fields[5]))
    return found


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


def check_address(host: object, port: object) -> None:
    """A ValueError unless host is a non-empty string and port a whole number from 0 to 65535 (0: any free one)."""
    check_text("host", host, example="'127.0.0.1'")
    check_int("port", port, minimum=0, maximum=65535)


def launch(
    command: list[str],
    log_prefix: str,
    url: str,
    timeout: float,
    health_path: str = "/health",
    env: dict[str, str] | None = None,
    own_session: bool = False,
    explain: Callable[[str, Path], str] | None = None,
    on_stop: Callable[[], None] | None = None,
    sweep_shared_memory: bool = False,
) -> ServerHandle:
    """Run a server's `command` in the background, its output in a new log file, and return its handle once
    `url + health_path` answers 200. own_session: in a process group of its own, so that stop() also ends
    the workers it spawns. If it dies or times out first, it is stopped and a RuntimeError carries the log's
    end (passed through explain(message, log) when given). on_stop: called once the server and its workers
    have ended (by stop(), or a failed start), to remove what they leave behind. sweep_shared_memory (with
    own_session): at stop, the /dev/shm files the group's processes had mapped and left behind are removed.

        >>> launch([sys.executable, "-m", "labkit", "serve", "--port", "8001"], "labkit-", "http://127.0.0.1:8001", 60)
    """
    log = Path(tempfile.mkstemp(prefix=log_prefix, suffix=".log")[1])
    with open(log, "w") as output:
        process = subprocess.Popen(
            command,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=os.environ.copy() if env is None else env,
            start_new_session=own_session,
            preexec_fn=die_with_parent,
        )
    handle = ServerHandle(process, url, log, on_stop, sweep_shared_memory)
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
            raise RuntimeError(
                f"The server exited with code {handle.process.returncode}:\n{tail(handle.log)}"
            )
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
