"""labkit.fast's entry point validates its steps once; the roofline and thread helpers measure right."""

import pytest
import torch

import labkit
from labkit.fast import STEPS, check_steps, optimize
from labkit.fast.fuse import is_fused
from labkit.fast.roofline import bandwidth_utilisation, read_bandwidth, weight_bytes_per_token
from labkit.fast.threads import fastest_thread_count, thread_candidates, using_threads
from labkit.quant.linear import QuantLinear


def test_optimize_applies_the_steps_in_order_and_returns_the_model():
    model = labkit.tiny_model(impl="labkit")
    assert optimize(model, ("fuse", "int8", "bf16")) is model
    assert is_fused(model) and isinstance(model.lm_head, QuantLinear)
    assert model.embed_tokens.weight.dtype == torch.bfloat16
    assert (
        optimize(labkit.tiny_model(impl="labkit"), ()).layers[0].self_attn.q_proj.weight.dtype
        == torch.float32
    )
    assert list(STEPS) == ["fuse", "onednn", "int8", "int4", "q4_1", "bf16"]
    q4 = optimize(labkit.tiny_model(impl="labkit"), ("fuse", "q4_1"))
    assert (
        type(q4.layers[0].mlp.down_proj).__name__ == "Q41Linear" and type(q4.lm_head).__name__ == "Q80Linear"
    )


@pytest.mark.parametrize(
    "steps,message",
    [
        (
            ("fuse", "int3"),
            r"Unknown steps \[.int3.\]. Allowed, in this order: fuse, onednn, int8, int4, q4_1, bf16",
        ),
        ("fuse", "a tuple of step names"),
        (("fuse", "fuse"), "once"),
        (("int8", "int4"), "at most one of onednn, int8, int4, q4_1"),
        (("int8", "fuse"), "in this order: fuse, onednn, int8, int4, q4_1, bf16"),
        (("bf16", "int4"), "in this order"),
    ],
)
def test_bad_steps_are_refused_with_what_is_allowed(steps, message):
    with pytest.raises(ValueError, match=message):
        optimize(labkit.tiny_model(impl="labkit"), steps)


def test_a_transformers_model_is_refused_with_the_way_out():
    with pytest.raises(ValueError, match=r"impl='labkit'.*Llama.from_hf"):
        optimize(labkit.tiny_model(impl="transformers"), ("fuse",))


def test_check_steps_returns_a_tuple():
    assert check_steps(["fuse", "int4", "bf16"]) == ("fuse", "int4", "bf16")


def test_weight_bytes_per_token_counts_what_one_decode_step_reads():
    model = labkit.tiny_model(impl="labkit")
    c = model.config
    layer = (
        c.hidden_size * (c.n_heads + 2 * c.n_kv_heads) * c.head_dim
        + c.n_heads * c.head_dim * c.hidden_size
        + 3 * c.hidden_size * c.intermediate_size
        + 2 * c.hidden_size
    )
    head = c.vocab_size * c.hidden_size  # the tied embedding, read whole as the head
    # + final norm + one embedding row
    expected = 4 * (c.n_layers * layer + head + c.hidden_size + c.hidden_size)
    assert weight_bytes_per_token(model) == expected
    assert weight_bytes_per_token(optimize(model, ("fuse",))) == expected  # the same bytes, fewer calls
    int8 = weight_bytes_per_token(optimize(labkit.tiny_model(impl="labkit"), ("int8",)))
    int4 = weight_bytes_per_token(optimize(labkit.tiny_model(impl="labkit"), ("int4",)))
    assert 0.25 < int8 / expected < 0.27 and int4 < int8  # int8 codes + bfloat16 scales per row


def test_bandwidth_is_measured_and_utilisation_is_bytes_times_rate_over_it():
    assert 1e8 < read_bandwidth(repeats=2, floats=2**20) < 1e13  # 0.1 GB/s to 10 TB/s
    assert bandwidth_utilisation(538e6, 20.0, 26.9e9) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="positive"):
        bandwidth_utilisation(1.0, 1.0, 0.0)


def test_thread_candidates_and_the_probe_restore_the_thread_count():
    assert (
        thread_candidates(6) == (1, 2, 4, 6)
        and thread_candidates(1) == (1,)
        and thread_candidates(8)[-1] == 8
    )
    before = torch.get_num_threads()
    seen = []
    best, seconds = fastest_thread_count(
        lambda: seen.append(torch.get_num_threads()), candidates=(1, 2), repeats=2
    )
    assert best in (1, 2) and set(seconds) == {1, 2} and seen.count(1) == seen.count(2) == 3
    assert torch.get_num_threads() == before
    with using_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    for count in (0, 1.0, True):
        with pytest.raises(ValueError, match="count must be a whole number of 1 or more, got "):
            with using_threads(count):
                pass
    with pytest.raises(ValueError, match="repeats must be a whole number of 1 or more, got 0"):
        fastest_thread_count(lambda: None, candidates=(1,), repeats=0)
    assert torch.get_num_threads() == before
