"""GGUF block decoding with labkit matches the `gguf` package bit for bit, on the course model's own file."""

import gguf
import numpy as np
import pytest
import torch

from labkit.models.registry import EMBEDDED_MODELS
from labkit.quant import gguf_blocks


@pytest.fixture(scope="module")
def reader():
    return gguf.GGUFReader(EMBEDDED_MODELS["smollm2-135m"].locate_gguf())


def same_bits(labkit_values: torch.Tensor, gguf_values: np.ndarray) -> bool:
    """Equal as float32 bit patterns (so -0.0 vs 0.0 or NaN payloads would count as different)."""
    return np.array_equal(
        labkit_values.numpy().view(np.uint32), gguf_values.astype(np.float32).view(np.uint32)
    )


@pytest.mark.parametrize(
    "name,kind",
    [
        ("blk.0.ffn_down.weight", "Q4_1"),
        ("blk.29.attn_v.weight", "Q4_1"),
        ("blk.7.attn_q.weight", "Q4_1"),
        ("token_embd.weight", "Q8_0"),
    ],
)
def test_the_embedded_files_blocks_decode_like_gguf(reader, name, kind):
    raw, found_kind, shape = gguf_blocks.read_gguf_tensor(reader, name)
    assert found_kind == kind
    values = gguf_blocks.dequantize_gguf(raw, kind, shape)
    assert values.shape == shape and values.dtype == torch.float32
    assert same_bits(values, gguf.dequantize(raw, gguf.GGMLQuantizationType[kind]))


def test_the_file_has_no_q4_0_so_we_make_blocks(reader):
    kinds = {t.tensor_type.name for t in reader.tensors}
    assert kinds == {"F32", "Q4_1", "Q8_0"}


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0", "Q4_1"])
@pytest.mark.parametrize("seed", [0, 1])
def test_blocks_made_by_gguf_quantize_decode_like_gguf(kind, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((48, 256)) * 0.05).astype(np.float32)
    x[0, :32] = 0.0  # an all-zero block (scale 0)
    x[1, 3] = 4.0  # an outlier
    qtype = gguf.GGMLQuantizationType[kind]
    raw = gguf.quantize(x, qtype)
    assert raw.shape == (48, 256 // 32 * gguf_blocks.BLOCK_BYTES[kind])
    decoded = gguf_blocks.dequantize_gguf(raw, kind, x.shape)
    assert same_bits(decoded, gguf.dequantize(raw, qtype))
    tolerance = {"Q8_0": 0.01, "Q4_0": 0.2, "Q4_1": 0.2}[kind]  # relative RMS error of the format
    assert float(np.sqrt(((decoded.numpy() - x) ** 2).mean() / (x**2).mean())) < tolerance


def test_a_q4_1_block_by_hand(reader):
    raw, _, _ = gguf_blocks.read_gguf_tensor(reader, "blk.0.ffn_down.weight")
    block = raw[0, :20]
    fields = gguf_blocks.block_fields(block, "Q4_1")
    by_hand = [fields["d"] * q + fields["m"] for q in fields["codes"]]  # value = d * q + m
    decoded = gguf_blocks.decode_q4_1(block)
    assert np.allclose(by_hand, decoded.numpy(), rtol=0, atol=1e-7)
    assert len(fields["codes"]) == 32 and all(0 <= q <= 15 for q in fields["codes"])
    # Byte j holds value j (low nibble) and value j + 16 (high nibble).
    assert fields["codes"][0] == block[4] & 0x0F and fields["codes"][16] == block[4] >> 4


@pytest.mark.slow
def test_decoded_weight_is_the_one_the_model_runs(reader, smollm2):
    """The cached safetensors model was converted from this file: a decoded Q4_1 tensor is its weight."""
    raw, kind, shape = gguf_blocks.read_gguf_tensor(reader, "blk.3.ffn_down.weight")
    decoded = gguf_blocks.dequantize_gguf(raw, kind, shape)
    assert torch.equal(decoded, smollm2[0].model.layers[3].mlp.down_proj.weight)


def test_bad_input():
    with pytest.raises(ValueError, match="Unsupported GGUF block format 'Q4_K'.*gguf.dequantize"):
        gguf_blocks.dequantize_gguf(np.zeros(144, np.uint8), "Q4_K")
    with pytest.raises(ValueError, match="not a whole number of Q4_1 blocks \\(20 bytes each\\)"):
        gguf_blocks.decode_q4_1(np.zeros(30, np.uint8))
    with pytest.raises(TypeError, match="raw bytes"):
        gguf_blocks.decode_q8_0(torch.zeros(34))
    with pytest.raises(KeyError, match="No tensor 'nope'"):
        gguf_blocks.read_gguf_tensor(EMBEDDED_MODELS["smollm2-135m"].locate_gguf(), "nope")
