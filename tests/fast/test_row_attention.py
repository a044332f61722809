"""labkit's batch-invariant attention (labkit.fast.row_attention): it computes attention (torch's fused
kernel agrees to float32 rounding), and a row's output is the same bits alone, right-padded beside longer
rows, packed end to end after another prompt, or fed in chunks, on every SIMD path, and the paths agree."""

import pytest
import torch

from labkit.core.attention import attention, causal_mask
from labkit.fast.kernel import load_kernel
from labkit.fast.row_attention import row_attention, runs_on_kernel

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64  # SmolLM2-135M's
NEG = float("-inf")


@pytest.fixture(scope="module", autouse=True)
def kernel():
    status = load_kernel()
    if not status.available:
        pytest.skip(
            f"labkit's kernel is unavailable here (tests/fast/test_kernel.py checks why): {status.reason}"
        )
    return status


def qkv(tokens: int, keys: int, batch: int = 1, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, HEADS, tokens, HEAD_DIM, generator=generator)
    k, v = (torch.randn(batch, KV_HEADS, keys, HEAD_DIM, generator=generator) for _ in range(2))
    return q, k, v


def test_it_computes_attention_as_torch_does():
    q, k, v = qkv(40, 40)
    mask = causal_mask(40, 40, q.device)
    assert torch.allclose(row_attention(q, k, v, mask), attention(q, k, v, mask), atol=1e-5)


def test_a_decode_row_gets_the_same_bits_alone_and_padded_beside_longer_rows():
    lengths = [37, 120, 5]
    q, k, v = qkv(1, max(lengths), batch=3)
    mask = torch.zeros(3, 1, 1, max(lengths))
    for row, length in enumerate(lengths):
        mask[row, ..., length:] = NEG
    together = row_attention(q, k, v, mask)
    for row, length in enumerate(lengths):
        alone = row_attention(
            q[row : row + 1],
            k[row : row + 1, :, :length],
            v[row : row + 1, :, :length],
            torch.zeros(1, length),
        )
        assert torch.equal(alone, together[row : row + 1])


def test_a_prompt_gets_the_same_bits_alone_packed_after_another_and_in_chunks():
    first, second = 23, 31
    q, k, v = qkv(first + second, first + second, seed=1)
    # each token sees its own prompt's keys up to itself
    mask = torch.full((first + second, first + second), NEG)
    mask[:first, :first] = causal_mask(first, first, q.device)
    mask[first:, first:] = causal_mask(second, second, q.device)
    packed = row_attention(q, k, v, mask)
    q2, k2, v2 = q[:, :, first:], k[:, :, first:], v[:, :, first:]
    alone = row_attention(q2, k2, v2, causal_mask(second, second, q.device))
    assert torch.equal(alone, packed[:, :, first:])
    chunk = 10  # the last tokens fed later, after the first ten are cached
    later = row_attention(q2[:, :, chunk:], k2, v2, causal_mask(second - chunk, second, q.device))
    assert torch.equal(later, alone[:, :, chunk:])


def test_every_simd_path_gives_the_same_bits(kernel):
    q, k, v = qkv(12, 50, batch=2, seed=2)
    mask = causal_mask(12, 50, q.device)[None, None].expand(2, 1, 12, 50).contiguous()
    mask[1, ..., 44:] = NEG
    outputs = {
        path: torch.ops.labkit.row_attention(q, k, v, mask, HEAD_DIM**-0.5, path) for path in kernel.paths
    }
    for path, out in outputs.items():
        assert torch.equal(out, outputs["scalar"]), path


def test_a_head_dim_the_kernel_does_not_take_falls_back_to_torch():
    q, k, v = torch.randn(1, 4, 6, 24), torch.randn(1, 2, 6, 24), torch.randn(1, 2, 6, 24)
    mask = causal_mask(6, 6, q.device)
    assert not runs_on_kernel(q)
    assert torch.equal(row_attention(q, k, v, mask), attention(q, k, v, mask))


def test_bad_input_gets_a_clear_error():
    q, k, v = qkv(2, 2)
    with pytest.raises(TypeError, match="mask"):
        row_attention(q, k, v, "causal")
    with pytest.raises(RuntimeError, match=r"k, v must be \[B, H_kv, S, D\]"):
        torch.ops.labkit.row_attention(q, k[..., :32], v[..., :32], torch.zeros(1, 1, 2, 2), 0.125, "auto")
    with pytest.raises(RuntimeError, match="not available on this CPU|path 'sve'"):
        torch.ops.labkit.row_attention(q, k, v, torch.zeros(1, 1, 2, 2), 0.125, "sve")
