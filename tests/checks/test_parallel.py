"""Notebook 16's checkers run the student's function on problems they set themselves: a Megatron split of an
MLP (checked by the sum of the partials and the blocks they come from), a GPipe pass's time (checked against
the checker's own simulation of the schedule) and a ring all-reduce's time (checked by stepping through the
ring). labkit's own split, bubble or ring formula, called under another name, does not count."""

import math

import torch

from labkit import checks
from labkit.checks.parallel import PIPELINE_PROBLEMS, ring_steps_seconds, simulated_pipeline
from labkit.parallel.cluster import Link, ring_all_reduce_seconds
from labkit.parallel.pipeline import bubble_fraction
from labkit.parallel.tensor_parallel import even_split

OWN = "calling labkit's version does not count"


def said(capsys, checker, *args) -> tuple[bool, str]:
    capsys.readouterr()
    return checker(*args), capsys.readouterr().out


def my_sharded_mlp(x, w_up, w_down, world):
    inter = w_up.shape[0]
    base, extra = divmod(inter, world)
    partials, start = [], 0
    for rank in range(world):
        stop = start + base + (1 if rank < extra else 0)  # the first ranks one column more
        partials.append(torch.relu(x @ w_up[start:stop].T) @ w_down[:, start:stop].T)
        start = stop
    return partials


def my_pipeline_time(stage_seconds, micro_batches):
    return sum(stage_seconds) + (micro_batches - 1) * max(stage_seconds)


def my_all_reduce_seconds(nbytes, ranks, bytes_per_s, latency_s):
    steps = 2 * (ranks - 1)
    return steps / ranks * nbytes / bytes_per_s + steps * latency_s


def test_right_answers_pass_and_empty_ones_are_not_attempted(capsys):
    for checker, answer in [
        (checks.check_sharded_mlp, my_sharded_mlp),
        (checks.check_pipeline_time, my_pipeline_time),
        (checks.check_all_reduce_seconds, my_all_reduce_seconds),
    ]:
        passed, out = said(capsys, checker, answer)
        assert passed is True, out
        passed, out = said(capsys, checker, None)
        assert passed is False and "Not attempted" in out


def test_a_split_that_is_not_megatrons_is_told_why(capsys):
    def whole(x, u, d, w):  # rank 0 does it all
        return [torch.relu(x @ u.T) @ d.T] + [torch.zeros(x.shape[0], d.shape[0], dtype=x.dtype)] * (w - 1)

    def shares(x, u, d, w):  # adds up, but no rank computed its own columns
        return [torch.relu(x @ u.T) @ d.T / w] * w

    def relu_after(x, u, d, w):  # the nonlinearity applied to the partial outputs: not local any more
        return [torch.relu(p) for p in my_sharded_mlp(x, u, d, w)]

    def even_only(x, u, d, w):  # a reshape that needs the columns to divide
        return [torch.relu(x @ u[c].T) @ d[:, c].T for c in torch.arange(u.shape[0]).view(w, -1)]

    for wrong, words in [
        (whole, "whole MLP"),
        (shares, "consecutive block"),
        (relu_after, "do not add up"),
        (even_only, "one column more"),
        (lambda x, u, d, w: my_sharded_mlp(x, u, d, w)[:-1], "one partial output per rank"),
        (lambda x, u, d, w: [p[:, :2] for p in my_sharded_mlp(x, u, d, w)], "full output's shape"),
    ]:
        passed, out = said(capsys, checks.check_sharded_mlp, wrong)
        assert passed is False and words in out, out


def test_any_sizes_of_consecutive_blocks_count():
    def chunked(x, u, d, w):  # torch.chunk's blocks: 3, 3, 3, 1 for 10 columns over 4
        return [torch.relu(x @ u[c].T) @ d[:, c].T for c in torch.arange(u.shape[0]).chunk(w)]

    assert checks.check_sharded_mlp(chunked)


def test_the_simulated_schedule_is_the_closed_form():
    for stage_seconds, micro_batches, _ in PIPELINE_PROBLEMS:
        assert (
            abs(
                simulated_pipeline(stage_seconds, micro_batches)
                - my_pipeline_time(stage_seconds, micro_batches)
            )
            < 1e-12
        )
    assert math.isclose(ring_steps_seconds(1e6, 4, 1e9, 1e-5), my_all_reduce_seconds(1e6, 4, 1e9, 1e-5))


def test_the_usual_pipeline_slips_get_their_own_hint(capsys):
    for wrong, words in [
        (lambda s, m: m * sum(s), "micro-batches overlap"),
        (lambda s, m: (m + len(s) - 1) * max(s), "each stage at that stage's own speed"),
        (lambda s, m: sum(s) + m * max(s), "already holds one pass"),
        (lambda s, m: (m + len(s) - 1) * sum(s) / len(s), "slowest stage sets the pace"),
    ]:
        passed, out = said(capsys, checks.check_pipeline_time, wrong)
        assert passed is False and words in out, out


def test_the_usual_ring_slips_get_their_own_hint(capsys):
    def no_single(n, p, b, lat):
        return my_all_reduce_seconds(n, p, b, lat) if p > 1 else lat

    for wrong, words in [
        (lambda n, p, b, lat: 2 * (p - 1) * (n / b + lat), "1/ranks share"),
        (lambda n, p, b, lat: my_all_reduce_seconds(n, p, b, lat) / 2, "two rounds"),
        (lambda n, p, b, lat: 2 * (p - 1) / p * n / b, "latency"),
        (lambda n, p, b, lat: 2 * (p - 1) / p * n / b + lat, "not once"),
        (no_single, "single rank"),
    ]:
        passed, out = said(capsys, checks.check_all_reduce_seconds, wrong)
        assert passed is False and words in out, out


def test_a_miss_unlike_any_slip_gets_the_idea_first_and_the_formula_later(capsys):
    odd = lambda s, m: 1.234 * sum(s)  # noqa: E731
    first = said(capsys, checks.check_pipeline_time, odd)[1]
    second = said(capsys, checks.check_pipeline_time, odd)[1]
    assert "first micro-batch" in first and "max(stage_seconds)" not in first
    assert "max(stage_seconds)" in second


def test_labkits_own_answers_do_not_count(capsys):
    def split_by_labkit(x, u, d, w):
        return [
            torch.relu(x @ u[r.start : r.stop].T) @ d[:, r.start : r.stop].T
            for r in even_split(u.shape[0], w)
        ]

    def bubble_based(s, m):  # equal stages only: (M + S - 1) t = M t / (1 - bubble)
        return m * max(s) / (1 - bubble_fraction(len(s), m))

    def ring_by_labkit(n, p, b, lat):
        return ring_all_reduce_seconds(n, p, Link("mine", b, lat))

    for checker, answer in [
        (checks.check_sharded_mlp, split_by_labkit),
        (checks.check_pipeline_time, bubble_based),
        (checks.check_all_reduce_seconds, ring_by_labkit),
    ]:
        passed, out = said(capsys, checker, answer)
        assert passed is False and OWN in out, out
