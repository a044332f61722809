"""bitsandbytes as the reference: SmolLM2 loads in 8-bit and 4-bit on this CPU, or says clearly why not."""

import pytest
import torch

import labkit
from labkit.quant import bnb
from labkit.quant.evaluation import model_nbytes


def test_every_mode_runs_on_this_cpu():
    """bitsandbytes 0.50 has a CPU backend: a tiny layer of each mode must run and give the right answer."""
    assert bnb.bitsandbytes_support("cpu") == {"int8": None, "nf4": None, "fp4": None}


def test_an_unsupported_mode_fails_with_a_message_naming_the_fix(monkeypatch):
    monkeypatch.setattr(bnb, "_probe", lambda mode, device: "NotImplementedError: no kernel for this device")
    with pytest.raises(
        bnb.BitsAndBytesUnavailable,
        match=r"cannot run mode 'nf4' on cpu: NotImplementedError.*quantize_model.*device='cuda'",
    ):
        bnb.load_bitsandbytes_model("smollm2-135m", "nf4")


def test_bad_arguments():
    with pytest.raises(ValueError, match="Unknown bitsandbytes mode 'int4'. Choose one of: int8, nf4, fp4"):
        bnb.load_bitsandbytes_model("smollm2-135m", "int4")
    with pytest.raises(KeyError, match="Unknown embedded model"):
        bnb.load_bitsandbytes_model("no-such-model", "nf4")


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode,layer_class,max_megabytes", [("int8", "Linear8bitLt", 230), ("nf4", "Linear4bit", 175)]
)
def test_smollm2_loads_quantized_and_answers(mode, layer_class, max_megabytes):
    model, tokenizer = bnb.load_bitsandbytes_model("smollm2-135m", mode)
    assert type(model.model.layers[0].mlp.down_proj).__name__ == layer_class
    assert isinstance(model.lm_head, torch.nn.Linear)  # transformers keeps the head in float
    assert model_nbytes(model) / 1e6 < max_megabytes  # fp32: 538 MB
    answer = labkit.chat(model, tokenizer, "What is the capital of France?", max_new_tokens=12)
    assert "Paris" in answer, answer


@pytest.mark.slow
def test_labkit_nf4_weights_equal_bitsandbytes_nf4_weights():
    """transformers + bitsandbytes and labkit's NF4 quantize the same float32 weight to the same values."""
    from bitsandbytes.functional import dequantize_4bit

    from labkit.quant.nf4 import nf4_dequantize, nf4_quantize

    model, _ = bnb.load_bitsandbytes_model("smollm2-135m", "nf4")
    reference, _ = labkit.load_model("smollm2-135m")
    weight = model.model.layers[5].mlp.up_proj.weight
    mine = nf4_quantize(reference.model.layers[5].mlp.up_proj.weight, block_size=64)
    assert torch.equal(mine.packed, weight.data.flatten())
    assert torch.equal(nf4_dequantize(mine), dequantize_4bit(weight.data, weight.quant_state))
