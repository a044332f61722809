"""labkit.launcher's stop() sweeps the shared memory a server's process group leaves behind (as vLLM's
killed ranks leave their message queues' psm_<id> segments), and only when asked to."""

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from labkit.launcher import ServerHandle, shared_memory_of

MAPS_A_SEGMENT = """
import mmap, sys, time
segment = open(sys.argv[1], "w+b")
segment.truncate(4096)
mapped = mmap.mmap(segment.fileno(), 4096)
print("mapped", flush=True)
time.sleep(600)
"""


def start_mapping(segment: Path, sweep: bool) -> ServerHandle:
    """A process in a session of its own that maps `segment` (a file of /dev/shm) and waits to be stopped."""
    process = subprocess.Popen(
        [sys.executable, "-c", MAPS_A_SEGMENT, str(segment)], stdout=subprocess.PIPE, start_new_session=True
    )
    assert process.stdout.readline().strip() == b"mapped"
    return ServerHandle(process, "http://127.0.0.1:9", Path("/dev/null"), sweep_shared_memory=sweep)


@pytest.fixture
def segment():
    path = Path("/dev/shm") / f"labkit-test-{uuid.uuid4().hex}"
    yield path
    path.unlink(missing_ok=True)


def test_stop_removes_the_segments_its_group_had_mapped(segment):
    handle = start_mapping(segment, sweep=True)
    assert segment in shared_memory_of(handle.group)
    handle.stop()
    assert not handle.is_running()
    assert not segment.exists()


def test_without_the_sweep_a_mapped_segment_outlives_its_server(segment):
    handle = start_mapping(segment, sweep=False)
    handle.stop()
    assert segment.exists()  # what vLLM's ranks left behind before start_vllm_server asked for the sweep


def test_an_unlinked_segment_is_not_listed(segment):
    handle = start_mapping(segment, sweep=True)
    segment.unlink()
    try:
        assert segment not in shared_memory_of(handle.group)
    finally:
        handle.stop()
