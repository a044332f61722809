"""One OpenMP team in the server process: the engine thread's, so its threads may spin between the step's ops.

torch runs its parallel ops on OpenMP (GNU libgomp), which gives every thread that starts a parallel region
a team of worker threads of its own. A server has two such threads if the main thread loads the model
(its team then sleeps for good) and the engine thread steps it. libgomp counts every thread of every team,
and when they outnumber the cores it stops its workers' short spin before sleeping: each of the step's
hundreds of parallel regions then wakes a sleeping worker. Measured on 2 cores (SmolLM2 fuse+q4_1, the
compiled decode step, batch 1, OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=10000, median of 38 steps):
stepped by the thread that loaded the model, 9.0 ms; by a second thread, 18.3 ms; by a second thread while
the loading thread kept one OpenMP thread (no team), 8.8 ms.

So the server's main thread keeps one torch thread; the model is loaded, optimized and its decode step
compiled on a short-lived thread with the process's torch threads (inductor writes the thread count into
the kernels it compiles), whose team ends with it; the engine thread then steps with the same count.

    >>> threads = torch.get_num_threads()
    >>> torch.set_num_threads(1)                            # the main thread: no team of its own
    >>> engine = built_on_a_thread(lambda: Engine(model, tokenizer, compile_decode=True), threads)
    >>> EngineThread(engine, threads=threads).start()       # steps with `threads` torch threads
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import torch

from labkit.core.arguments import check_int

T = TypeVar("T")


def built_on_a_thread(build: Callable[[], T], threads: int) -> T:
    """build() run on a new thread with `threads` torch threads; its result, or the exception it raised."""
    check_int("threads", threads, minimum=1)
    result: dict[str, object] = {}

    def run() -> None:
        torch.set_num_threads(threads)
        try:
            result["value"] = build()
        except BaseException as error:  # handed to the caller's thread
            result["error"] = error

    builder = threading.Thread(target=run, name="labkit-build")
    builder.start()
    builder.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
