"""Notebook 05's checkers: labkit's own Mirostat pieces or MBR selection do not count, and the reading of the
Mirostat run (reached? why not?) is a checked choice that the pass message does not give away."""

import math

import torch

from labkit import checks, run_log
from labkit.decoding.mbr import mbr_select
from labkit.decoding.mirostat import MirostatRun, MirostatStep, mirostat_update, mirostat_v2_filter
from labkit.decoding.sampling import sample


def mirostat_step(logits, tau, eta, mu, generator, labkit_pieces=False):
    if labkit_pieces:
        probs = mirostat_v2_filter(logits, mu).softmax(-1)
    else:
        probs = logits.softmax(-1)
        remove = (-torch.log2(probs) > mu).scatter(-1, probs.argmax(-1, keepdim=True), False)
        probs = logits.masked_fill(remove, -math.inf).softmax(-1)
    token = int(sample(probs, generator)[0])
    surprise = float(-torch.log2(probs[0, token]))
    return token, (mirostat_update(mu, surprise, tau, eta) if labkit_pieces else mu - eta * (surprise - tau))


def test_mirostat_step_with_labkit_pieces_does_not_count(capsys):
    assert checks.check_mirostat_step(mirostat_step)
    capsys.readouterr()
    assert not checks.check_mirostat_step(lambda *a: mirostat_step(*a, labkit_pieces=True))
    assert "does not count" in capsys.readouterr().out


def test_mbr_select_of_labkit_does_not_count(capsys):
    assert not checks.check_mbr_select(
        lambda candidates, similarity: candidates[mbr_select(candidates, similarity)[0]]
    )
    assert "does not count" in capsys.readouterr().out


def run(last_mu: float) -> MirostatRun:
    """A tau = 5 run whose tokens settle at 2.7 bits after the first 10; mu ends at last_mu. Recorded in the
    run log, as mirostat_generate's own run would be."""
    surprises = [6.0] * 10 + [2.5, 3.0, 2.0, 3.3]
    steps = [MirostatStep(7, s, 10.0 if i < 13 else last_mu, 50) for i, s in enumerate(surprises)]
    return run_log.record_result(MirostatRun([7] * 14, steps, 5.0))


def test_mean_surprise_reading_is_a_checked_choice(capsys):
    rising = run(last_mu=14.0)  # mu kept rising: the cut let ever more through, and still no 5 bits
    assert not checks.check_mean_surprise(2.7, rising, 10)
    assert "reached" in capsys.readouterr().out  # the number is right; the reading is still to give
    assert not checks.check_mean_surprise(2.7, rising, 10, reached=True)
    assert "tau" in capsys.readouterr().out
    assert not checks.check_mean_surprise(2.7, rising, 10, reached=False)
    assert "why" in capsys.readouterr().out
    for wrong in ("too_slow", "cut_too_much"):
        assert not checks.check_mean_surprise(2.7, rising, 10, reached=False, why=wrong)
        assert "does not fit" in capsys.readouterr().out
    assert not checks.check_mean_surprise(2.7, rising, 10, reached=False, why="the controller is broken")
    assert "choose one of" in capsys.readouterr().out
    assert checks.check_mean_surprise(2.7, rising, 10, reached=False, why="cut_only")
    passed = capsys.readouterr().out
    for interpretation in ("out of reach", "never add surprise", "plain sampling", "kept rising", "cut less"):
        assert interpretation not in passed


def test_mean_surprise_hints(capsys):
    assert not checks.check_mean_surprise(70.8 / 14, run(14.0), 10)
    assert "leave out the first 10" in capsys.readouterr().out
    assert not checks.check_mean_surprise(3.5, run(14.0), 10)
    first = capsys.readouterr().out
    assert not checks.check_mean_surprise(3.5, run(14.0), 10)
    assert "run.surprises" not in first and "run.surprises" in capsys.readouterr().out
