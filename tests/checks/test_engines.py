"""Checkers of notebook 12 pass the worked solutions, give a hint for each common mistake, and never raise."""

import pytest

from labkit import checks
from labkit.checks.engines import THREAD_LIMITS, decode_bound_verdict, memory_needed_verdict
from labkit.models.catalog import load_catalog

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


def greedy_agreement(reference, other, n=32):  # the worked solution
    shared = 0
    for a, b in zip(reference[:n], other[:n]):
        if a != b:
            break
        shared += 1
    return shared


def test_greedy_agreement(capsys):
    assert checks.check_greedy_agreement(greedy_agreement)
    assert "Correct" in capsys.readouterr().out
    assert not checks.check_greedy_agreement(lambda a, b, n: sum(x == y for x, y in zip(a[:n], b[:n])))
    assert "every matching position" in capsys.readouterr().out
    assert not checks.check_greedy_agreement(lambda a, b, n: a[n])  # raises inside: a hint, not a crash
    assert "raised IndexError" in capsys.readouterr().out
    assert not checks.check_greedy_agreement(None)
    assert "Not attempted" in capsys.readouterr().out


def test_decode_bound(capsys):
    right = 50e9 / (8e9 * 4.5 / 8)
    assert decode_bound_verdict(right, params_b=8.0, bits_per_weight=4.5, bandwidth_gb_s=50)
    assert "11.1 tokens/s" in capsys.readouterr().out
    hints = {
        right / 8: "divide the bits per weight by 8",
        1 / right: "upside down",
        right * 1.073741824: "GB = 1e9",
        3.0: "is not it",
        "fast": "give a number",
    }
    for answer, hint in hints.items():
        assert not decode_bound_verdict(answer, params_b=8.0, bits_per_weight=4.5, bandwidth_gb_s=50)
        assert hint in capsys.readouterr().out


def test_memory_needed(capsys):
    llama = next(m for m in load_catalog() if m.name == LLAMA_8B)
    weights = llama.params_b * 1e9 * 4.5 / 8
    kv = 2 * llama.n_layers * llama.n_kv_heads * llama.head_dim * 2 * 8192
    assert memory_needed_verdict((weights + kv) / 1e9, LLAMA_8B, quant="q4", context_tokens=8192)
    assert "GB of KV cache for 8192 tokens" in capsys.readouterr().out
    assert not memory_needed_verdict(weights / 1e9, LLAMA_8B, quant="q4", context_tokens=8192)
    assert "weights alone" in capsys.readouterr().out
    every_head = (weights + kv * llama.n_heads / llama.n_kv_heads) / 1e9
    assert not memory_needed_verdict(every_head, LLAMA_8B, quant="q4", context_tokens=8192)
    assert "KV heads only" in capsys.readouterr().out


@pytest.mark.parametrize("two_threads, limited_by", [(240.0, "work"), (130.0, "even"), (45.0, "wake-ups")])
def test_thread_speedup_is_the_ratio_of_measured_rates_and_a_checked_reading(
    capsys, as_measured, two_threads, limited_by
):
    rates = {1: 135.0, 2: two_threads}  # tokens/s, as llama.cpp measured in notebook 12's exercise
    as_measured(rates)
    assert checks.check_thread_speedup(two_threads / 135.0, limited_by, rates)
    out = capsys.readouterr().out
    assert not any(meaning in out for meaning in THREAD_LIMITS.values()), out
    for other in set(THREAD_LIMITS) - {limited_by}:
        assert not checks.check_thread_speedup(two_threads / 135.0, other, rates)
        assert "does not fit your measurement" in capsys.readouterr().out
    for wrong, hint in [
        (135.0 / two_threads, "upside down"),
        (100 * two_threads / 135.0, "not a percentage"),
        (two_threads - 135.0, "difference in tokens/s"),
        ("twice", "give a number"),
        (two_threads / 135.0 * 1.3, "not what your two measurements give"),
    ]:
        assert not checks.check_thread_speedup(wrong, limited_by, rates)
        assert hint in capsys.readouterr().out
    assert not checks.check_thread_speedup(None, limited_by, rates)
    assert "Not attempted yet" in capsys.readouterr().out
