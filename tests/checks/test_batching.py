"""Checkers of notebook 10 pass the worked solutions, give a hint for wrong answers, and never raise."""

import math

import pytest

from labkit import checks
from labkit.checks.batching import BATCH_LIMITS, kv_blocks_verdict


def test_kv_blocks(capsys):
    lengths, size = [37, 5, 16, 71], 16
    assert kv_blocks_verdict(3 + 1 + 1 + 5, lengths, size)  # the worked solution: ceil per sequence
    for wrong, hint in [
        (math.ceil(129 / 16), "round up each sequence on its own"),
        (2 + 0 + 1 + 4, "round up, not down"),
        (129, "number of tokens"),
        (129 / 16, "whole blocks"),
        (11, "is not it"),
        ("ten", "give a number"),
    ]:
        assert not kv_blocks_verdict(wrong, lengths, size)
        assert hint in capsys.readouterr().out
    assert not kv_blocks_verdict(None, lengths, size)
    assert "Not attempted yet" in capsys.readouterr().out


def wasted_slots(prompt_lengths, output_lengths):  # the worked solution
    padding = sum(max(prompt_lengths) - p for p in prompt_lengths)
    idle = sum(max(output_lengths) - o for o in output_lengths)
    return padding + idle


def test_wasted_slots(capsys):
    assert checks.check_wasted_slots(wasted_slots)
    assert "Correct" in capsys.readouterr().out
    wrongs = [
        (lambda p, o: sum(max(o) - x for x in o), "not the prompts' padding"),
        (lambda p, o: sum(max(p) - x for x in p), "not the idle decode slots"),
        (
            lambda p, o: sum(max(a + b for a, b in zip(p, o)) - a - b for a, b in zip(p, o)),
            "padded separately",
        ),
        (lambda p, o: 0, "Add two counts"),
        (lambda p, o: 1 / 0, "raised ZeroDivisionError"),
    ]
    for fn, hint in wrongs:
        assert not checks.check_wasted_slots(fn)
        assert hint in capsys.readouterr().out
    assert not checks.check_wasted_slots(None)
    assert "Not attempted yet" in capsys.readouterr().out


def admit(prompt_lengths, free_blocks, block_size, free_seats):  # the worked solution
    admitted = 0
    for length in prompt_lengths:
        need = -(-length // block_size)
        if admitted == free_seats or need > free_blocks:
            break
        free_blocks -= need
        admitted += 1
    return admitted


def skips_ahead(prompt_lengths, free_blocks, block_size, free_seats):
    admitted = 0
    for length in prompt_lengths:
        need = -(-length // block_size)
        if admitted < free_seats and need <= free_blocks:
            free_blocks -= need
            admitted += 1
    return admitted


def ignores_seats(prompt_lengths, free_blocks, block_size, free_seats):
    return admit(prompt_lengths, free_blocks, block_size, len(prompt_lengths))


def rounds_down(prompt_lengths, free_blocks, block_size, free_seats):
    return admit(
        [(p // block_size) * block_size for p in prompt_lengths], free_blocks, block_size, free_seats
    )


def test_fcfs_admission(capsys):
    assert checks.check_fcfs_admission(admit)
    assert "Correct" in capsys.readouterr().out
    for fn, hint in [
        (skips_ahead, "FIRST request that does not fit"),
        (ignores_seats, "at most free_seats"),
        (rounds_down, "ceil(n / block_size)"),
        (lambda *a: [], "gave []"),
    ]:
        assert not checks.check_fcfs_admission(fn)
        assert hint in capsys.readouterr().out
    assert not checks.check_fcfs_admission(lambda *a: 1 / 0)
    assert "raised ZeroDivisionError" in capsys.readouterr().out
    assert not checks.check_fcfs_admission(None)
    assert "Not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "step_64_s, limited_by",
    [(0.055, "shared work"), (0.08, "both"), (0.095, "per-row work"), (0.11, "per-row work")],
)
def test_batch_gain_is_the_ratio_of_measured_rates_and_a_checked_reading(
    capsys, as_measured, step_64_s, limited_by
):
    step_32_s = 0.05
    as_measured(step_32_s, step_64_s)
    gain = (64 / step_64_s) / (32 / step_32_s)
    assert checks.check_batch_gain(gain, limited_by, step_32_s, step_64_s, rows=32, more_rows=64)
    out = capsys.readouterr().out
    assert not any(name in out or meaning in out for name, meaning in BATCH_LIMITS.items()), out
    for other in set(BATCH_LIMITS) - {limited_by}:
        assert not checks.check_batch_gain(gain, other, step_32_s, step_64_s, rows=32, more_rows=64)
        assert "does not fit your measurement" in capsys.readouterr().out
    assert not checks.check_batch_gain(gain, "memory", step_32_s, step_64_s)
    assert "choose one of" in capsys.readouterr().out
    for wrong, hint in [
        (step_64_s / step_32_s, "how much longer the step got"),
        (1 / gain, "upside down"),
        (100 * gain, "not a percentage"),
        ("twice", "give a number"),
        (gain * 1.5, "not what your two measurements give"),
    ]:
        assert not checks.check_batch_gain(wrong, limited_by, step_32_s, step_64_s, rows=32, more_rows=64)
        assert hint in capsys.readouterr().out
    assert not checks.check_batch_gain(None, limited_by, step_32_s, step_64_s)
    assert "Not attempted yet" in capsys.readouterr().out
    assert not checks.check_batch_gain(gain, None, step_32_s, step_64_s)
    assert "Not attempted yet" in capsys.readouterr().out
