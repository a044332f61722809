"""Admission: what the serving engine checks before a request joins its queue, and how it turns one away.

A request (or each of a batch of prompts, `check_prompt_list`) is refused at the door, before it takes a
seat or a block, for one of two reasons:

- it could never run here: more samples than the engine has seats (n samples share one prefill, so they
  need n seats at once), a log-probability count outside 0..MAX_LOGPROBS, or beam search, which the
  engine does not do (its samples are independent); each is a ValueError/TypeError naming the argument;
- it could run, but not now: the queue already holds `max_waiting` requests beyond the free seats. That
  one is `EngineBusy`, which a server answers with 503 so that the client comes back later (vLLM and
  llama-server bound their queues the same way) rather than wait behind a queue that only grows.

`EngineLoad` is the engine's state between steps, the numbers this decision reads and a server's /health shows.

    >>> check_seats(4, max_num_seqs=8)              # fine: 4 seats of 8
    >>> check_queue_room(EngineLoad(8, 70, 0, 120, 3, 512, 0.4), max_waiting=64)
    Traceback (most recent call last):
    EngineBusy: The server is busy: 8 requests running and 70 waiting (at most 64 may wait). Try again shortly.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.core.arguments import InvalidArgument
from labkit.decoding.config import DecodingConfig
from labkit.serving.scheduler import Scheduler


class EngineBusy(RuntimeError):
    """More requests wait than the engine was told to queue (`max_waiting`): come back later."""


@dataclass(frozen=True)
class EngineLoad:
    """The engine's state between steps: what a server shows on /health and uses to turn requests away."""

    running: int  # sequences with a seat (decoding, or their prompt being prefilled)
    waiting: int  # requests queued for a seat or for memory
    free_seats: int  # max_num_seqs - running - samples still to fork from the running ones
    blocks_used: int  # KV blocks held by running requests (a Gemma3's: its global layers' pool)
    blocks_cached: int  # free blocks still holding a named prefix (reused by a later request, or evicted)
    blocks_total: int  # the pool
    prefix_hit_rate: float  # share of looked-up prompt blocks found in the pool
    # a Gemma3's sliding-window layers' pool (None without window layers): blocks held, and its size
    window_blocks_used: int | None = None
    window_blocks_total: int | None = None

    @classmethod
    def of(cls, scheduler: Scheduler) -> EngineLoad:
        """The load of the engine `scheduler` schedules for, read from its queues and its block manager."""
        manager, allocator = scheduler.block_manager, scheduler.block_manager.allocator
        free_seats = scheduler.config.max_num_seqs - scheduler.seats_used
        local = None if manager.window is None else manager.window.allocator
        return cls(
            len(scheduler.running),
            len(scheduler.waiting),
            free_seats,
            allocator.n_used,
            manager.n_cached_free,
            allocator.n_blocks,
            manager.hit_rate,
            None if local is None else local.n_used,
            None if local is None else local.n_blocks,
        )


def check_prompt_list(prompts: object) -> None:
    """Refuse prompts unless it is a list (or tuple) of prompts, a batch; one string is a single prompt.

    >>> check_prompt_list("Hi")
    Traceback (most recent call last):
    ValueError: prompts must be a list of prompts (one string, token ids or messages each), got str (wrap ...
    """
    if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)):
        hint = " (wrap one prompt as [prompt])" if isinstance(prompts, str) else ""
        raise ValueError(
            f"prompts must be a list of prompts (one string, token ids or messages each), got "
            f"{type(prompts).__name__}{hint}."
        )


def check_seats(n: int, max_num_seqs: int) -> None:
    """Refuse n samples when the engine has fewer seats: n samples share one prefill and then decode side
    by side, so all n need a seat at once (n itself is checked by `RequestSpec`). An InvalidArgument naming
    "n", which a server renames to its client's field.

        >>> check_seats(9, max_num_seqs=8)
        Traceback (most recent call last):
        InvalidArgument: n must be at most 8 (this engine's max_num_seqs): the 9 samples share one prefill ...
    """
    if n > max_num_seqs:
        raise InvalidArgument(
            f"n must be at most {max_num_seqs} (this engine's max_num_seqs): the {n} samples share one "
            f"prefill, so they need {n} seats at once. Ask for fewer, or create the engine with more seats.",
            "n",
            n,
        )


def refuse_beams(config: DecodingConfig) -> None:
    """Refuse a config with num_beams > 1: the engine's samples are independent, beams are not.

    >>> refuse_beams(DecodingConfig(num_beams=4))
    Traceback (most recent call last):
    ValueError: The engine samples (n independent samples per request); for beam search use ...
    """
    if config.num_beams > 1:
        raise ValueError(
            "The engine samples (n independent samples per request); for beam search use "
            "labkit.generate(model, tokenizer, prompt, num_beams=...)."
        )


def check_queue_room(load: EngineLoad, max_waiting: int | None) -> None:
    """Raise EngineBusy when max_waiting requests already wait beyond the free seats (None: no limit).
    A request that waits while a seat is free takes that seat at the next step, so only the surplus counts.

        >>> check_queue_room(EngineLoad(2, 3, 6, 10, 0, 64, 0.0), max_waiting=0)   # 3 waiting, 6 seats free
    """
    if max_waiting is not None and load.waiting - load.free_seats >= max_waiting:
        raise EngineBusy(
            f"The server is busy: {load.running} requests running and {load.waiting} "
            f"waiting (at most {max_waiting} may wait). Try again shortly."
        )
