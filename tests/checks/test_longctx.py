"""Notebook 15's checkers run the student's function on problems they set themselves: a merge of two
partial softmaxes (checked against softmax attention over the whole row), and a windowed cache's bytes
(checked against the count of rows each kind of layer keeps). labkit's own fold of a tile or memory
calculator, called under another name, does not count."""

import math

import torch

from labkit import checks
from labkit.core.tiled_attention import Running, add_tile
from labkit.models.shapes import ModelShape

OWN = "calling labkit's version does not count"


def said(capsys, checker, *args) -> tuple[bool, str]:
    capsys.readouterr()
    return checker(*args), capsys.readouterr().out


def my_merge(a, b, rescale_l=True, rescale_acc=True):
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    m = torch.maximum(m_a, m_b)
    alpha, beta = torch.exp(m_a - m), torch.exp(m_b - m)
    ones = torch.ones_like(alpha)
    l = l_a * (alpha if rescale_l else ones) + l_b * (beta if rescale_l else ones)  # noqa: E741
    acc = acc_a * (alpha if rescale_acc else ones) + acc_b * (beta if rescale_acc else ones)
    return m, l, acc


def my_cache_bytes(tokens, global_layers, local_layers, window, kv_heads, head_dim, bytes_per_number):
    kept = global_layers * tokens + local_layers * min(tokens, window)
    return 2 * kept * kv_heads * head_dim * bytes_per_number


def test_a_right_merge_passes_and_an_empty_answer_is_not_attempted(capsys):
    assert said(capsys, checks.check_softmax_merge, my_merge)[0]
    passed, out = said(capsys, checks.check_softmax_merge, None)
    assert passed is False and "Not attempted" in out


def test_a_merge_that_forgets_a_rescaling_is_told_which(capsys):
    passed, out = said(capsys, checks.check_softmax_merge, lambda a, b: my_merge(a, b, rescale_l=False))
    assert passed is False and "sum l" in out, out
    passed, out = said(capsys, checks.check_softmax_merge, lambda a, b: my_merge(a, b, rescale_acc=False))
    assert passed is False and "accumulator" in out, out


def test_a_merge_without_the_max_overflows_and_is_told_so(capsys):
    def no_max(a, b):  # exp of the raw scores: the states are rebuilt as if every max were 0
        (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
        zero = torch.zeros_like(m_a)
        scale_a, scale_b = torch.exp(m_a.float()).double(), torch.exp(m_b.float()).double()
        return zero, l_a * scale_a + l_b * scale_b, acc_a * scale_a + acc_b * scale_b

    passed, out = said(capsys, checks.check_softmax_merge, no_max)
    assert passed is False and ("inf or nan" in out or "max" in out), out


def test_a_merge_that_calls_labkits_fold_of_a_tile_does_not_count(capsys):
    def borrowed(a, b):  # fold a tile with labkit's add_tile (here a dummy one), keep the right merge
        state = Running(torch.full((1, 1), -torch.inf), torch.zeros(1, 1), torch.zeros(1, 2))
        add_tile(
            state, torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 1, dtype=bool), 1.0
        )
        return my_merge(a, b)

    passed, out = said(capsys, checks.check_softmax_merge, borrowed)
    assert passed is False and OWN in out, out


def test_a_right_cache_count_passes(capsys):
    assert said(capsys, checks.check_windowed_cache_bytes, my_cache_bytes)[0]
    passed, out = said(capsys, checks.check_windowed_cache_bytes, None)
    assert passed is False and "Not attempted" in out


def test_the_usual_slips_get_their_own_hint(capsys):
    def uncapped(t, g, loc, w, h, d, b):
        return 2 * (g + loc) * t * h * d * b

    def all_capped(t, g, loc, w, h, d, b):
        return 2 * (g + loc) * min(t, w) * h * d * b

    def keys_only(*problem):
        return my_cache_bytes(*problem) / 2

    def window_always(t, g, loc, w, h, d, b):
        return 2 * (g * t + loc * w) * h * d * b

    for slip, words in [
        (uncapped, "only the last `window`"),
        (all_capped, "global ones keep every token"),
        (keys_only, "keys and values"),
        (window_always, "shorter than the window"),
    ]:
        passed, out = said(capsys, checks.check_windowed_cache_bytes, slip)
        assert passed is False and words in out, (slip.__name__, out)


def test_a_cache_count_from_labkits_calculator_does_not_count(capsys):
    def borrowed(tokens, global_layers, local_layers, window, kv_heads, head_dim, bytes_per_number):
        n_layers = global_layers + local_layers
        shape = ModelShape("x", 1e6, n_layers, kv_heads, kv_heads, head_dim, 10**6, window, local_layers)
        dtype = {1: "int8", 2: "fp16", 4: "fp32"}[bytes_per_number]
        return shape.kv_cache_bytes(tokens, dtype=dtype)

    passed, out = said(capsys, checks.check_windowed_cache_bytes, borrowed)
    assert passed is False and OWN in out, out
    assert math.isfinite(my_cache_bytes(8, 1, 1, 4, 1, 2, 2))
