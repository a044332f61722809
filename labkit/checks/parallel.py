"""Exercise checkers for past one machine, notebook 16 (see labkit/checks/foundation.py for the style). Each
runs the student's function on problems it sets itself and checks it against its own working: the sum of
the ranks' partial MLPs, a simulation of the pipeline's schedule, the steps of a ring. A function that calls
labkit's own split, bubble or ring formula does not count.

    >>> checks.check_sharded_mlp(sharded_mlp)
    >>> checks.check_pipeline_time(pipeline_time)
    >>> checks.check_all_reduce_seconds(all_reduce_seconds)
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import torch

from labkit.checks.common import not_attempted, verdict
from labkit.checks.work import progressive, reset, run_own
from labkit.parallel.cluster import ring_all_gather_seconds, ring_all_reduce_seconds
from labkit.parallel.pipeline import bubble_fraction
from labkit.parallel.tensor_parallel import RowParallelLinear, even_split, shard_llama

__all__ = ["check_sharded_mlp", "check_pipeline_time", "check_all_reduce_seconds"]

MLP_REFERENCES = [even_split, shard_llama, RowParallelLinear.forward]
PIPELINE_REFERENCES = [bubble_fraction]
RING_REFERENCES = [ring_all_reduce_seconds, ring_all_gather_seconds]


# --- exercise 1: an MLP split the Megatron way ------------------------------------------------------------

MLP_PROBLEMS = [  # (batch, hidden, intermediate, world, what the case tests)
    (3, 6, 8, 2, "2 ranks, 8 intermediate columns"),
    (4, 8, 12, 3, "3 ranks, 12 intermediate columns"),
    (2, 5, 16, 4, "4 ranks, 16 intermediate columns"),
    (4, 6, 7, 2, "7 intermediate columns over 2 ranks (an uneven split)"),
    (3, 4, 10, 4, "10 intermediate columns over 4 ranks (an uneven split)"),
]


def mlp(x: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """y = relu(x @ w_up.T) @ w_down.T: x [B, hidden], w_up [inter, hidden], w_down [hidden, inter]."""
    return torch.relu(x @ w_up.T) @ w_down.T


def is_block_split(partials: list[torch.Tensor], x, w_up, w_down) -> bool:
    """Whether the partials are, rank by rank, the MLP of consecutive non-empty blocks of intermediate columns
    (any block sizes): a depth-first search over where each block stops."""
    inter = w_up.shape[0]

    def rest(rank: int, start: int) -> bool:
        if rank == len(partials):
            return start == inter
        for stop in range(start + 1, inter - (len(partials) - rank - 1) + 1):
            block = mlp(x, w_up[start:stop], w_down[:, start:stop])
            if torch.allclose(partials[rank], block, rtol=1e-6, atol=1e-9) and rest(rank + 1, stop):
                return True
        return False

    return rest(0, 0)


def mlp_miss(got: object, x, w_up, w_down, world: int) -> str:
    """What is wrong with the returned partials, or "" when they are a Megatron split."""
    y = mlp(x, w_up, w_down)
    if not isinstance(got, list | tuple) or len(got) != world:
        count = f"a list of {len(got)}" if isinstance(got, list | tuple) else type(got).__name__
        return f"return a list of {world} tensors, one partial output per rank (got {count})."
    if not all(isinstance(p, torch.Tensor) for p in got):
        return "every partial should be a torch tensor."
    partials = [p.to(torch.float64) for p in got]
    if any(tuple(p.shape) != tuple(y.shape) for p in partials):
        return (
            f"each rank's partial has the full output's shape {list(y.shape)}: a row-parallel product "
            "covers every output, summing only part of the intermediate columns."
        )
    if any(torch.allclose(p, y, rtol=1e-6, atol=1e-9) for p in partials):
        return "one rank computed the whole MLP: each should use only its own slice of w_up and w_down."
    if not torch.allclose(sum(partials), y, rtol=1e-6, atol=1e-9):
        idea = (
            "a rank keeps some rows of w_up and the same columns of w_down: relu acts on each intermediate "
            "column alone, so it stays local, and only the final products need adding up."
        )
        return "the partials do not add up to the MLP's output. " + progressive(
            "sharded_mlp", [idea, MLP_IDEA]
        )
    if not is_block_split(partials, x, w_up, w_down):
        return (
            "the partials add up, but a rank's partial should be the MLP of its own consecutive block of "
            "intermediate columns (its rows of w_up, its columns of w_down), not a share of the result."
        )
    return ""


def check_sharded_mlp(sharded_mlp: Callable | None) -> bool:
    """Exercise (16): sharded_mlp(x, w_up, w_down, world) -> a list of `world` partial outputs [B, hidden],
    rank r's from its own consecutive block of the intermediate columns (w_up's rows, w_down's columns),
    which sum to relu(x @ w_up.T) @ w_down.T (the all-reduce). The checker sets its own sizes and worlds 2-4,
    uneven splits included; calling labkit's even_split or shard_llama does not count."""
    if sharded_mlp is None:
        return not_attempted("your function sharded_mlp(x, w_up, w_down, world)")
    generator = torch.Generator().manual_seed(16)
    for batch, hidden, inter, world, what in MLP_PROBLEMS:
        x = torch.randn(batch, hidden, generator=generator, dtype=torch.float64)
        w_up = torch.randn(inter, hidden, generator=generator, dtype=torch.float64)
        w_down = torch.randn(hidden, inter, generator=generator, dtype=torch.float64)
        got, error = run_own(
            sharded_mlp, x.clone(), w_up.clone(), w_down.clone(), world, references=MLP_REFERENCES
        )
        if error:
            uneven = inter % world != 0
            tip = (
                " Some ranks must take one column more when the columns do not divide evenly."
                if uneven
                else ""
            )
            return verdict(False, f"sharded_mlp on {what}: {error.rstrip('.')}.{tip}")
        miss = mlp_miss(got, x, w_up, w_down, world)
        if miss:
            return verdict(False, f"sharded_mlp on {what}: {miss}")
    reset("sharded_mlp")
    return verdict(
        True,
        "column-parallel up, row-parallel down: each rank's relu stays local, and one all-reduce (a sum) "
        "after the MLP puts the output together, whatever the split's sizes.",
    )


MLP_IDEA = (
    "rank r takes a block of columns c: partial_r = relu(x @ w_up[c].T) @ w_down[:, c].T, and the "
    "partials of all the blocks sum to y."
)


# --- exercise 2: a GPipe forward pass's time ---------------------------------------------------------------

PIPELINE_PROBLEMS = [  # (seconds per micro-batch of each stage, micro-batches, what the case tests)
    ([1.0, 1.0, 1.0, 1.0], 4, "4 equal stages, 4 micro-batches"),
    ([0.2, 0.5, 0.3], 6, "3 unequal stages, the middle one slowest"),
    ([0.1, 0.4], 1, "one micro-batch"),
    ([2.0], 3, "a single stage"),
    ([0.9, 0.3, 0.3, 0.1], 5, "the first stage slowest"),
    ([0.25, 0.25, 0.75], 8, "the last stage slowest, 8 micro-batches"),
]


def simulated_pipeline(stage_seconds: list[float], micro_batches: int) -> float:
    """When the last stage finishes the last micro-batch: a stage starts micro-batch m once it has finished
    m - 1 and the stage before has finished m (a schedule, stepped through; no formula)."""
    done = [0.0] * len(stage_seconds)  # when each stage finished its latest micro-batch
    for _ in range(micro_batches):
        arrived = 0.0  # micro-batch m leaves the previous stage
        for stage, seconds in enumerate(stage_seconds):
            done[stage] = max(done[stage], arrived) + seconds
            arrived = done[stage]
    return done[-1]


def pipeline_hint(got: float, stage_seconds: list[float], micro_batches: int) -> str:
    """The usual slip behind a wrong pipeline time (said at once); else the idea, then the formula."""
    total, slowest, m, s = sum(stage_seconds), max(stage_seconds), micro_batches, len(stage_seconds)
    slips = [
        (
            m * total,
            "micro-batches overlap: while a later stage works on one, the earlier stages start the next.",
        ),
        (
            (m + s - 1) * total / s,
            "the stages differ: the slowest stage sets the pace once the pipe is full.",
        ),
        (
            (m + s - 1) * slowest,
            "before the pipe is full, the first micro-batch passes each stage at that stage's own speed.",
        ),
        (
            total + m * slowest,
            "the first micro-batch's trip through every stage already holds one pass of the slowest stage.",
        ),
        (m * slowest, "the first micro-batch still has to cross every stage before the last one can start."),
    ]
    for wrong, hint in slips:
        if math.isclose(got, wrong, rel_tol=1e-9):
            return hint
    idea = "follow the first micro-batch through every stage, then count what each later one adds at the end."
    return progressive("pipeline_time", [idea, PIPELINE_IDEA])


def check_pipeline_time(pipeline_time: Callable | None) -> bool:
    """Exercise (16): pipeline_time(stage_seconds, micro_batches) -> the seconds of a GPipe forward pass in
    which stage i takes stage_seconds[i] for each of `micro_batches` equal micro-batches, each sent on as
    soon as it is done. Checked against the checker's own step-by-step simulation of the schedule."""
    if pipeline_time is None:
        return not_attempted("your function pipeline_time(stage_seconds, micro_batches)")
    for stage_seconds, micro_batches, what in PIPELINE_PROBLEMS:
        got, error = run_own(
            pipeline_time, list(stage_seconds), micro_batches, references=PIPELINE_REFERENCES
        )
        if error:
            return verdict(False, f"pipeline_time on {what}: {error}")
        if isinstance(got, bool) or not isinstance(got, int | float) or not math.isfinite(got):
            return verdict(False, f"pipeline_time on {what} returned {got!r}: return a number of seconds.")
        if not math.isclose(got, simulated_pipeline(stage_seconds, micro_batches), rel_tol=1e-9):
            return verdict(
                False, f"pipeline_time on {what}: {pipeline_hint(got, stage_seconds, micro_batches)}"
            )
    reset("pipeline_time")
    return verdict(
        True,
        "the first micro-batch crosses every stage, then each further one leaves at the slowest stage's "
        "pace: "
        "more micro-batches hide the fill, and a slow stage slows them all.",
    )


PIPELINE_IDEA = "seconds = sum(stage_seconds) + (micro_batches - 1) x max(stage_seconds)."


# --- exercise 3: a ring all-reduce's time ------------------------------------------------------------------


def ring_problems(generator: random.Random) -> list[tuple[float, int, float, float, str]]:
    """(bytes, ranks, bytes per second, latency seconds, what the case tests), drawn by the checker."""
    cases = [
        (float(generator.randrange(1_000, 100_000)), 2, 12.5e9, 1e-5, "2 ranks over 100 Gb/s Ethernet"),
        (float(generator.randrange(10**6, 10**8)), 8, 450e9, 2e-6, "8 ranks over NVLink"),
        (float(generator.randrange(10**3, 10**5)), 1, 25e9, 5e-6, "a single rank"),
        (16384.0, generator.choice([3, 5, 6]), 3.125e9, 1e-5, "an odd group over 25 Gb/s Ethernet"),
        (
            float(generator.randrange(10**4, 10**6)),
            4,
            generator.uniform(1e9, 5e9),
            0.0,
            "a link without latency",
        ),
    ]
    return cases


def ring_steps_seconds(nbytes: float, ranks: int, bytes_per_s: float, latency_s: float) -> float:
    """A ring all-reduce stepped through: the message cut in `ranks` chunks; ranks - 1 steps of reduce-scatter
    and ranks - 1 of all-gather, in each of which every rank sends one chunk to its neighbour."""
    chunk, seconds = nbytes / ranks, 0.0
    for _phase in ("reduce-scatter", "all-gather"):
        for _step in range(ranks - 1):
            seconds += latency_s + chunk / bytes_per_s
    return seconds


def ring_hint(got: float, nbytes: float, ranks: int, bytes_per_s: float, latency_s: float) -> str:
    """The usual slip behind a wrong all-reduce time (said at once); else the idea, then the formula."""
    p, share = ranks, (ranks - 1) / ranks
    if ranks == 1:
        return "a single rank has nothing to add up with anyone: the all-reduce costs nothing."
    slips = [
        (
            2 * (p - 1) * (nbytes / bytes_per_s + latency_s),
            "each step sends one chunk, a 1/ranks share of the message, not all of it.",
        ),
        (
            share * nbytes / bytes_per_s + (p - 1) * latency_s,
            "an all-reduce is two rounds: a reduce-scatter, then an all-gather.",
        ),
        (
            2 * share * nbytes / bytes_per_s,
            "every step waits for the link's latency before its bytes arrive.",
        ),
        (
            2 * share * nbytes / bytes_per_s + latency_s,
            "the latency is paid at every step of the ring, not once.",
        ),
        (
            2 * nbytes / bytes_per_s + 2 * (p - 1) * latency_s,
            "each rank sends only (ranks - 1) of the ranks chunks in a round.",
        ),
    ]
    for wrong, hint in slips:
        if math.isclose(got, wrong, rel_tol=1e-9):
            return hint
    idea = "cut the message in one chunk per rank and count the ring's steps, each a latency plus one chunk."
    return progressive("all_reduce_seconds", [idea, RING_IDEA])


def check_all_reduce_seconds(all_reduce_seconds: Callable | None) -> bool:
    """Exercise (16): all_reduce_seconds(nbytes, ranks, bytes_per_s, latency_s) -> the seconds of a ring
    all-reduce of nbytes over `ranks` ranks on links of bytes_per_s each way and latency_s a message. The
    checker draws its own messages and links and steps through the ring itself."""
    if all_reduce_seconds is None:
        return not_attempted("your function all_reduce_seconds(nbytes, ranks, bytes_per_s, latency_s)")
    for *problem, what in ring_problems(random.Random(16)):
        got, error = run_own(all_reduce_seconds, *problem, references=RING_REFERENCES, name_args=True)
        if error:
            return verdict(False, f"all_reduce_seconds on {what}: {error}")
        if isinstance(got, bool) or not isinstance(got, int | float) or not math.isfinite(got):
            return verdict(
                False, f"all_reduce_seconds on {what} returned {got!r}: return a number of seconds."
            )
        if not math.isclose(got, ring_steps_seconds(*problem), rel_tol=1e-9, abs_tol=1e-15):
            return verdict(False, f"all_reduce_seconds on {what}: {ring_hint(got, *problem)}")
    reset("all_reduce_seconds")
    return verdict(
        True,
        "2 (p - 1) steps of one chunk each: the bytes a rank sends barely grow with the ranks, but the "
        "latencies do, so small messages (a decode step's) pay mostly latency.",
    )


RING_IDEA = "seconds = 2 (ranks - 1) / ranks x nbytes / bytes_per_s + 2 (ranks - 1) x latency_s."
