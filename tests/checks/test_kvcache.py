"""Checkers of notebooks 06-07 pass right answers, give a hint for wrong ones, and never raise."""

import torch

from labkit import checks
from labkit.checks.kvcache import kv_cache_bytes_verdict
from labkit.checks.prefill import arithmetic_intensity_verdict, max_context_verdict
from labkit.models import sizing as memory


def test_kv_cache_bytes(capsys):
    smollm2 = memory.PRESETS["smollm2-135m"]
    right = 2 * 30 * 3 * 64 * 1000 * 4 * 2
    assert kv_cache_bytes_verdict(right, smollm2, tokens=1000, batch=4, dtype="fp16")
    assert kv_cache_bytes_verdict(right, "smollm2-135m", tokens=1000, batch=4, dtype="fp16")
    for wrong, hint in [
        (right // 2, "factor 2"),
        (right * 3, "key/value heads"),
        (right // 4, "each with its own"),
        (right / 1e6, "megabytes"),
        (right + 1000, "is not it"),
        ("lots", "give a number"),
    ]:
        assert not kv_cache_bytes_verdict(wrong, smollm2, tokens=1000, batch=4, dtype="fp16")
        assert hint in capsys.readouterr().out
    assert not kv_cache_bytes_verdict(None, smollm2, 1000, 4)
    assert "Not attempted yet" in capsys.readouterr().out


class GrowingCache:
    def __init__(self, n_layers):
        self.keys, self.values, self.length = [None] * n_layers, [None] * n_layers, 0

    def append(self, layer, k, v):
        if self.keys[layer] is not None:
            k, v = torch.cat([self.keys[layer], k], dim=2), torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def advance(self, n_tokens):
        self.length += n_tokens


class ForgetsToAdvance(GrowingCache):
    def advance(self, n_tokens):
        pass


class ReturnsOnlyNew(GrowingCache):
    def append(self, layer, k, v):
        super().append(layer, k, v)
        return k, v


class OneListForAllLayers(GrowingCache):
    def append(self, layer, k, v):
        return super().append(0, k, v)


def test_growing_cache(tiny, capsys):
    assert checks.check_growing_cache(GrowingCache, tiny)
    assert not checks.check_growing_cache(ForgetsToAdvance, tiny)
    assert "advance adds n_tokens to length" in capsys.readouterr().out
    assert not checks.check_growing_cache(ReturnsOnlyNew, tiny)
    assert "every key cached so far" in capsys.readouterr().out
    assert not checks.check_growing_cache(OneListForAllLayers, tiny)
    assert "one list entry per layer" in capsys.readouterr().out
    assert not checks.check_growing_cache(lambda n_layers: 1 / 0, tiny)
    assert "raised ZeroDivisionError" in capsys.readouterr().out
    assert not checks.check_growing_cache(None, tiny)


def test_arithmetic_intensity(capsys):
    assert arithmetic_intensity_verdict(4.0, batch=8, bytes_per_weight=4)
    for wrong, hint in [
        (2.0, "2 FLOPs"),
        (0.25, "not bytes divided by FLOPs"),
        (0.5, "grow with the batch"),
        (16, "not 1"),
        (7, "is not it"),
    ]:
        assert not arithmetic_intensity_verdict(wrong, batch=8, bytes_per_weight=4)
        assert hint in capsys.readouterr().out


def test_ttft_tpot(capsys):
    def right(times):
        return times[0], (times[-1] - times[0]) / (len(times) - 1)

    def averages_everything(times):
        return times[0], times[-1] / len(times)

    assert checks.check_ttft_tpot(right)
    assert not checks.check_ttft_tpot(averages_everything)
    assert "leaves out the first token" in capsys.readouterr().out
    assert not checks.check_ttft_tpot(lambda times: (times[1], 0.0))
    assert "arrival time of the first token" in capsys.readouterr().out
    assert not checks.check_ttft_tpot(lambda times: times[0])
    assert "raised TypeError" in capsys.readouterr().out


def test_max_context(capsys):
    llama = memory.PRESETS["llama-3.1-8b"]
    right = llama.max_tokens(80 * memory.GB, batch=8)
    assert max_context_verdict(right, "llama-3.1-8b", memory_gb=80, batch=8)
    assert not max_context_verdict(int(80e9 // llama.kv_cache_bytes(1, 8)), "llama-3.1-8b", 80, 8)
    assert "subtract the weights first" in capsys.readouterr().out
    assert not max_context_verdict(right * 8, "llama-3.1-8b", 80, 8)
    assert "tokens per sequence" in capsys.readouterr().out
    assert max_context_verdict(0, "llama-3.1-70b", memory_gb=80)
    assert not max_context_verdict(1000, "llama-3.1-70b", memory_gb=80)
    assert "start with the weights" in capsys.readouterr().out


def test_kv_cache_bytes_first_miss_names_the_idea(capsys):
    assert not kv_cache_bytes_verdict(12345, "smollm2-135m", tokens=1000, batch=4)
    first = capsys.readouterr().out
    assert not kv_cache_bytes_verdict(12345, "smollm2-135m", tokens=1000, batch=4)
    assert "2 x layers" not in first and "2 x layers" in capsys.readouterr().out


def test_labkit_cache_does_not_count(tiny, capsys):
    from labkit.core.kv_cache import KVCache

    class Borrowed(KVCache):  # labkit's cache under the student's name
        pass

    for borrowed in (KVCache, Borrowed, lambda n_layers: tiny.new_cache(1, 64)):
        assert not checks.check_growing_cache(borrowed, tiny)
        assert "does not count" in capsys.readouterr().out


POSITIONS = [16, 64, 128, 192, 256]
WITHOUT = [0.08 + 0.0017 * p for p in POSITIONS]  # 1.7 ms per token of context
WITH = [0.05] * 5


def test_context_token_cost_checks_the_times_and_the_reading(tiny, capsys, monkeypatch, as_measured):
    from labkit.checks import kvcache

    # the checker's own step at 256
    monkeypatch.setattr(kvcache, "step_seconds_without_cache", lambda *a: 0.5)
    args = as_measured(POSITIONS, WITHOUT, WITH, tiny, None)
    assert not checks.check_context_token_cost(1.7, *args)
    assert "why" in capsys.readouterr().out
    assert not checks.check_context_token_cost(1.7, *args, why="attention_free")
    assert "does not fit" in capsys.readouterr().out
    assert checks.check_context_token_cost(1.7, *args, why="shared_pass")
    passed = capsys.readouterr().out
    for interpretation in ("weights are read once", "shares", "own arithmetic", "dispatched"):
        assert interpretation not in passed
    invented = as_measured([10 * t for t in WITHOUT])[0]  # ten times slower than the checker's own step
    assert not checks.check_context_token_cost(17.0, POSITIONS, invented, WITH, tiny, None, why="shared_pass")
    assert "3 times off" in capsys.readouterr().out


def test_context_token_cost_times_a_step_for_real(tiny, capsys, as_measured):
    """A made-up step of 100 s fails against the checker's real timing of the tiny model (milliseconds)."""
    prompt = torch.tensor([[1, 504, 3575, 282] * 8])
    invented = [100.0 + p for p in POSITIONS[:2]]
    as_measured(invented, [0.05])  # in the run log, so only the checker's own timing can catch them
    assert not checks.check_context_token_cost(
        1000.0, [16, 32], invented, [0.05, 0.05], tiny, prompt, why="shared_pass"
    )
    assert "3 times off" in capsys.readouterr().out


def test_max_context_counts_the_reserve_of_its_kind_of_memory(capsys):
    llama = memory.PRESETS["llama-3.1-8b"]
    after_reserve = llama.max_tokens(71e9, 8, "fp16")  # 80 GB of VRAM less 10 % + 1 GB
    assert max_context_verdict(after_reserve, "llama-3.1-8b", 80, 8, kind="VRAM")
    capsys.readouterr()
    assert not max_context_verdict(llama.max_tokens(80e9, 8, "fp16"), "llama-3.1-8b", 80, 8, kind="VRAM")
    assert "reserve" in capsys.readouterr().out
