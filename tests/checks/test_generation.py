"""Notebook 02's checkers: a write-exercise that calls labkit's own loop is a miss, and made-up timings fail
because the checker times both loops again."""

import pytest
import torch

import labkit
from labkit import checks
from labkit.checks import generation
from labkit.decoding.generate import generate_ids


def test_next_token_probs(tiny_hf, tokenizer, capsys):
    def right(model, input_ids):
        return torch.softmax(model(input_ids).logits[0, -1], dim=-1)

    def all_positions(model, input_ids):
        return torch.softmax(model(input_ids).logits[0], dim=-1)

    def raw_logits(model, input_ids):
        return model(input_ids).logits[0, -1]

    assert checks.check_next_token_probs(right, tiny_hf, tokenizer)
    assert not checks.check_next_token_probs(all_positions, tiny_hf, tokenizer)
    assert "last position only" in capsys.readouterr().out
    assert not checks.check_next_token_probs(raw_logits, tiny_hf, tokenizer)
    assert "apply softmax" in capsys.readouterr().out


@pytest.mark.slow
def test_greedy_loop(smollm2, capsys):
    model, tokenizer = smollm2  # a random tiny_hf model repeats one token, which hides a missing append

    def right(model, prompt_ids, n_tokens):
        logits, cache = labkit.prefill(model, torch.tensor([prompt_ids]))
        new_ids = []
        for _ in range(n_tokens):
            new_ids.append(int(logits[0].argmax()))
            logits = labkit.decode_step(model, torch.tensor([new_ids[-1]]), cache)
        return new_ids

    def without_cache(model, prompt_ids, n_tokens):
        ids = list(prompt_ids)
        for _ in range(n_tokens):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        return ids[len(prompt_ids) :]

    def forgets_to_append(model, prompt_ids, n_tokens):
        return [int(model(torch.tensor([prompt_ids])).logits[0, -1].argmax())] * n_tokens

    assert checks.check_greedy_loop(right, model, tokenizer)
    assert not checks.check_greedy_loop(forgets_to_append, model, tokenizer)
    assert "most likely next token" in capsys.readouterr().out
    assert not checks.check_greedy_loop(without_cache, model, tokenizer)
    assert "KV cache" in capsys.readouterr().out


def test_labkit_own_loop_under_another_name_does_not_count(tiny_hf, tokenizer, capsys):
    def my_greedy(model, prompt_ids, n_tokens):  # a thin wrapper around labkit's answer
        return generate_ids(model, tokenizer, prompt_ids, max_new_tokens=n_tokens)

    for function in (my_greedy, lambda m, ids, n: labkit.generate_ids(m, tokenizer, ids, max_new_tokens=n)):
        assert not checks.check_greedy_loop(function, tiny_hf, tokenizer)
        assert "does not count" in capsys.readouterr().out


def test_cache_speedup_checks_the_times_against_its_own_run(tiny_hf, capsys, monkeypatch, timed):
    monkeypatch.setattr(generation, "loop_seconds", lambda *a: (6.0, 1.5))  # the checker's own re-run
    timed(6.0, 1.5, 60.0, 5.0)  # the student's times, as if measured in this kernel
    prompt = [1, 504, 3575]
    assert not checks.check_cache_speedup(None, None, 1.0, tiny_hf, prompt)
    assert "Not attempted" in capsys.readouterr().out
    assert not checks.check_cache_speedup(4.0, 6.0, 1.5, tiny_hf, prompt)
    assert "gap" in capsys.readouterr().out  # the speed-up is right; the interpretation is still to give
    assert checks.check_cache_speedup(4.0, 6.0, 1.5, tiny_hf, prompt, gap="grow")
    passed = capsys.readouterr().out
    for interpretation in ("grow", "longer", "wider", "one token"):
        assert interpretation not in passed
    assert not checks.check_cache_speedup(4.0, 6.0, 1.5, tiny_hf, prompt, gap="shrink")
    assert "does not fit" in capsys.readouterr().out
    assert not checks.check_cache_speedup(0.25, 6.0, 1.5, tiny_hf, prompt, gap="grow")
    assert "other way round" in capsys.readouterr().out
    assert not checks.check_cache_speedup(4.5, 6.0, 1.5, tiny_hf, prompt, gap="grow")
    assert "time saved" in capsys.readouterr().out
    # invented, 10x too slow
    assert not checks.check_cache_speedup(12.0, 60.0, 5.0, tiny_hf, prompt, gap="grow")
    assert "3 times off" in capsys.readouterr().out


def test_cache_speedup_times_the_loops_for_real(tiny_hf, capsys, timed):
    """Invented numbers a thousand times off fail against the checker's real timing (no threshold near the
    truth: the tiny model's loops take milliseconds, the invented ones minutes)."""
    timed(400.0, 100.0)  # even as measurements of this kernel
    assert not checks.check_cache_speedup(4.0, 400.0, 100.0, tiny_hf, [1, 504, 3575], gap="grow")
    assert "3 times off" in capsys.readouterr().out
    without, with_cache = generation.loop_seconds(tiny_hf, [1, 504, 3575], 4)
    assert without > 0 and with_cache > 0


def test_cache_speedup_refuses_times_this_kernel_did_not_measure(tiny_hf, capsys, monkeypatch, timed):
    """2.0 s and 2.0 s, typed, used to pass as "1.0x faster" wherever the real loops took about that long."""
    monkeypatch.setattr(generation, "loop_seconds", lambda *a: (2.0, 2.0))
    timed(2.0 + 1e-9)  # a measurement near, but not, the typed number
    assert not checks.check_cache_speedup(1.0, 2.0, 2.0, tiny_hf, [1, 504, 3575], gap="same")
    out = capsys.readouterr().out
    assert "seconds_without_cache, seconds_with_cache were not measured in this kernel" in out
