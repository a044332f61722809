"""The onednn step: float32 weights packed for oneDNN's matmul give F.linear's numbers (up to float32
rounding) at every batch size, eager and compiled, in a model and in the serving engine, where each request
still gets what `generate` gives the same model alone; wrong inputs and steps are refused by name."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import labkit
from labkit.fast.onednn_linear import OneDnnLinear, pack_for_onednn
from labkit.fast.optimize import check_steps, optimize
from labkit.serving.engine import Engine

from ..serving.conftest import run_staggered

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch without oneDNN")


@pytest.mark.parametrize("rows", [1, 2, 3, 16, 40])
@pytest.mark.parametrize("bias", [False, True])
def test_a_packed_layer_gives_f_linear_numbers_at_every_batch_size(rows, bias):
    torch.manual_seed(rows)
    linear = nn.Linear(96, 160, bias=bias)
    packed = OneDnnLinear.from_linear(linear)
    x = torch.randn(rows, 96)
    expected = F.linear(x, linear.weight, linear.bias)
    torch.testing.assert_close(packed(x), expected, rtol=1e-5, atol=1e-5)
    # a batch of sequences [B, T, in] keeps its leading dimensions
    assert packed(x.view(rows, 1, 96)).shape == (rows, 1, 160)


def test_the_compiled_layer_calls_the_packed_op_and_matches_eager():
    torch.manual_seed(0)
    packed = OneDnnLinear.from_linear(nn.Linear(64, 48, bias=False))
    x = torch.randn(4, 1, 64)
    with torch.no_grad():
        compiled = torch.compile(packed, fullgraph=True)(x)
    torch.testing.assert_close(compiled, packed(x), rtol=1e-6, atol=1e-6)


def test_a_packed_model_keeps_its_logits_and_its_tied_head():
    model = labkit.tiny_model("labkit", seed=0)
    ids = torch.tensor([[1, 5, 9, 13, 2]])
    with torch.no_grad():
        expected = model(ids)
        optimize(model, ("fuse", "onednn"))
        got = model(ids)
    assert isinstance(model.lm_head, OneDnnLinear)
    assert model.lm_head.weight is model.embed_tokens.weight  # the tie kept for whatever reads the weight
    assert not any(type(m) is nn.Linear for m in model.modules())
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_staggered_requests_on_packed_weights_get_what_each_gets_alone(tokenizer, one_thread):
    model = pack_for_onednn(labkit.tiny_model("labkit", seed=0))
    prompts = ["Hi", "The sea is", "Once upon a time, in a land far away,", "A"]
    requests = [(prompt, {"max_new_tokens": n}) for prompt, n in zip(prompts, [5, 9, 3, 12])]
    engine = Engine(model, tokenizer, max_num_seqs=3, block_size=4)
    ids = run_staggered(engine, requests, arrivals=[0, 0, 1, 2])
    for request_id, (prompt, options) in zip(ids, requests):
        assert engine.requests[request_id].output_ids == labkit.generate_ids(
            model, tokenizer, prompt, **options
        )
    assert engine.pool.allocator.n_used == 0


@pytest.mark.parametrize(
    "steps, says",
    [
        (("onednn", "q4_1"), "at most one of onednn, int8, int4, q4_1"),
        (("onednn", "bf16"), "cannot run with bf16"),
        (("onednn", "fuse"), "Steps must come in this order"),
    ],
)
def test_steps_that_cannot_go_with_onednn_are_refused_by_name(steps, says):
    with pytest.raises(ValueError, match=says):
        check_steps(steps)


def test_activations_of_another_dtype_or_width_are_refused_by_name():
    packed = OneDnnLinear.from_linear(nn.Linear(8, 4, bias=False))
    with pytest.raises(ValueError, match=r"float32 activations \[\.\.\., 8\], got torch.bfloat16"):
        packed(torch.randn(2, 8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"\[\.\.\., 8\], got torch.float32 \(2, 7\)"):
        packed(torch.randn(2, 7))
    with pytest.raises(ValueError, match="2-D float32 weight"):
        OneDnnLinear(nn.Parameter(torch.zeros(4, 8, dtype=torch.float16)))


@pytest.mark.slow  # compiles the decode step for batch sizes 1 and 2: about 20 s on 2 cores
def test_the_engines_compiled_step_on_packed_weights_gives_each_prompt_what_it_gets_alone(
    tokenizer, one_thread
):
    model = pack_for_onednn(labkit.tiny_model("labkit", seed=0))
    prompts = ["Hi", "The sea is", "Once upon a time, in a land far away,"]
    requests = [(prompt, {"max_new_tokens": n}) for prompt, n in zip(prompts, [6, 9, 4])]
    engine = Engine(model, tokenizer, max_num_seqs=2, compile_decode=True)
    ids = run_staggered(engine, requests, arrivals=[0, 1, 3])
    assert engine.runner.compiled.steps > 0
    for request_id, (prompt, options) in zip(ids, requests):
        assert engine.requests[request_id].output_ids == labkit.generate_ids(
            model, tokenizer, prompt, **options
        )
