"""Running one function on `world` real processes that talk over torch.distributed's gloo backend (TCP on
this machine): what `torchrun --nproc-per-node` does, small enough to read.

Each rank is a fresh Python process (the "spawn" start method: nothing of the parent's torch state is shared),
with its own torch thread count, joined into one process group at a free local port. `run_ranks` returns every
rank's result, in rank order. A rank that raises ends the run with a RuntimeError holding its traceback (and
those of the ranks that failed with it); a run past `timeout` is killed. Either way every process is gone when `run_ranks` returns.

    >>> run_ranks(world_size_times_rank, world=2)   # a function importable by name, e.g. in labkit
    [0, 2]
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import socket
import time
import traceback
from collections.abc import Callable

import torch
import torch.distributed as dist

from labkit.core.arguments import check_int


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rank_main(
    function: Callable, rank: int, world: int, port: int, threads: int, args: tuple, results
) -> None:
    """One rank: set its threads, join the group, run function(rank, world, *args), put (rank, ok, value)."""
    torch.set_num_threads(threads)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        try:
            # as bytes: a tensor put on a multiprocessing queue as it is travels as a shared-memory handle,
            # which is gone once this process exits, often before the parent reads it
            results.put((rank, True, pickle.dumps(function(rank, world, *args))))
        finally:
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - every failure goes back to the parent, as text
        results.put((rank, False, traceback.format_exc()))


def run_ranks(function: Callable, world: int, *args, threads: int = 1, timeout: float = 300.0) -> list:
    """function(rank, world, *args) in each of `world` new processes of `threads` torch threads, joined by
    gloo; their return values (picklable), in rank order. `function` must be importable by its name
    (defined at a module's top level), as multiprocessing's spawn needs.

        >>> run_ranks(labkit.parallel.tensor_run.link_seconds, 2, (576,))[0]   # {numbers: seconds}
        {576: 0.00038}
    """
    if not callable(function) or "<locals>" in getattr(function, "__qualname__", "<locals>"):
        raise TypeError(
            "function must be defined at a module's top level, so each new process can import it."
        )
    check_int("world", world, minimum=1, maximum=os.cpu_count() or 1, note="one process per core at most")
    check_int("threads", threads, minimum=1)
    context = mp.get_context("spawn")
    results, port = context.Queue(), free_port()
    processes = [
        context.Process(target=rank_main, args=(function, rank, world, port, threads, args, results))
        for rank in range(world)
    ]
    for process in processes:
        process.start()
    try:
        return collect(results, processes, world, timeout)
    finally:
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()


def collect(results, processes: list, world: int, timeout: float) -> list:
    """Every rank's value, in rank order; a RuntimeError with the first failing rank's traceback, when a rank
    dies without a word (a crash), or when `timeout` seconds pass."""
    values: dict[int, object] = {}
    deadline = time.monotonic() + timeout
    while len(values) < world:
        try:
            rank, ok, value = results.get(timeout=0.5)
        except queue.Empty:
            crashed = [r for r, p in enumerate(processes) if p.exitcode not in (None, 0) and r not in values]
            if crashed or time.monotonic() > deadline:
                why = (
                    f"rank {crashed[0]} exited with code {processes[crashed[0]].exitcode}" if crashed else ""
                )
                raise RuntimeError(
                    f"run_ranks: {world - len(values)} of {world} ranks gave no result "
                    + (why or f"within {timeout:.0f} s")
                ) from None
            continue
        if not ok:
            raise RuntimeError(failures(results, {rank: value}, world))
        values[rank] = pickle.loads(value)
    return [values[rank] for rank in range(world)]


def failures(results, failed: dict[int, str], world: int, wait: float = 2.0) -> str:
    """Every failing rank's traceback, in rank order, waiting `wait` seconds for the others: when one rank
    raises, its peers then fail in their collectives ("Connection closed by peer"), and the first report to
    arrive is not always the cause."""
    deadline = time.monotonic() + wait
    while len(failed) < world and time.monotonic() < deadline:
        try:
            rank, ok, value = results.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if not ok:
            failed[rank] = value
    return "\n".join(f"run_ranks: rank {rank} of {world} failed:\n{failed[rank]}" for rank in sorted(failed))
