"""labkit's batch-invariant attention (labkit.fast.row_attention): it computes attention (torch's fused
kernel agrees to float32 rounding), and a row's output is the same bits alone, right-padded beside longer
rows, packed end to end after another prompt, or fed in chunks, on every SIMD path, and the paths agree.
Its paged twin, reading the past in place from a pool, gives the bits of the same keys copied out."""

import pytest
import torch

from labkit.core.attention import attention, causal_mask
from labkit.fast.kernel import load_kernel
from labkit.fast.row_attention import paged_row_attention, row_attention, runs_on_kernel
from labkit.serving.compiled_step import step_mask

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


def paged_problem(batch: int, width: int, past: int, seed: int):
    """One layer of a pool [H_kv, slots, D], each row's past at scattered slots (a padding row's at slot 0),
    its new tokens' keys, and the decode step's mask: row b sees its first seen[b] past keys, then its new
    tokens causally."""
    generator = torch.Generator().manual_seed(seed)
    slots = 96
    q = torch.randn(batch, HEADS, width, HEAD_DIM, generator=generator)
    pool_k, pool_v = (torch.randn(KV_HEADS, slots, HEAD_DIM, generator=generator) for _ in range(2))
    new_k, new_v = (torch.randn(batch, KV_HEADS, width, HEAD_DIM, generator=generator) for _ in range(2))
    read = torch.randperm(slots, generator=generator)[: batch * past].view(batch, past)
    seen = torch.randint(1, past + 1, (batch,), generator=generator)
    seen[-1] = 0  # a padding row: it sees only its new tokens
    read = read.masked_fill(torch.arange(past)[None, :] >= seen[:, None], 0)
    mask = step_mask(seen, past, width)
    return q, pool_k, pool_v, read, new_k, new_v, mask


def gathered(pool: torch.Tensor, read: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """Row b's past keys copied out of pool [H_kv, slots, D] at read[b], its new ones after: [B, H_kv, S + W, D]."""
    return torch.cat([pool[:, read].transpose(0, 1), new], dim=2).contiguous()


@pytest.mark.parametrize("width", [1, 5])
def test_paged_attention_gives_the_gathered_keys_bits_on_every_path(kernel, width):
    q, pool_k, pool_v, read, new_k, new_v, mask = paged_problem(batch=4, width=width, past=23, seed=width)
    keys, values = gathered(pool_k, read, new_k), gathered(pool_v, read, new_v)
    for path in kernel.paths:
        paged = torch.ops.labkit.paged_row_attention(
            q, pool_k, pool_v, read, new_k, new_v, mask, HEAD_DIM**-0.5, path
        )
        copied = torch.ops.labkit.row_attention(q, keys, values, mask, HEAD_DIM**-0.5, path)
        assert torch.equal(paged, copied), path
    assert torch.equal(paged_row_attention(q, pool_k, pool_v, read, new_k, new_v, mask), copied)
    assert torch.allclose(copied, attention(q, keys, values, mask), atol=1e-5)  # and it is attention


def test_paged_attention_without_the_kernel_gathers_and_falls_back():
    q, pool_k, pool_v, read, new_k, new_v, mask = paged_problem(batch=3, width=2, past=9, seed=3)
    q, pool_k, pool_v, new_k, new_v = (t[..., :24] for t in (q, pool_k, pool_v, new_k, new_v))  # D = 24
    assert not runs_on_kernel(q)
    expected = attention(q, gathered(pool_k, read, new_k), gathered(pool_v, read, new_v), mask)
    assert torch.equal(paged_row_attention(q, pool_k, pool_v, read, new_k, new_v, mask), expected)


def test_paged_attention_refuses_a_slot_outside_the_pool_and_wrong_shapes():
    q, pool_k, pool_v, read, new_k, new_v, mask = paged_problem(batch=2, width=1, past=4, seed=4)
    paged = torch.ops.labkit.paged_row_attention
    with pytest.raises(RuntimeError, match=r"read slot \d+ is outside the pool.s 96"):
        paged(q, pool_k, pool_v, read + 96 * (read > 0), new_k, new_v, mask, 0.125, "auto")
    with pytest.raises(RuntimeError, match=r"k_pool, v_pool must be \[H_kv, slots, D\]"):
        paged(q, pool_k, pool_v[:, :10], read, new_k, new_v, mask, 0.125, "auto")
    with pytest.raises(RuntimeError, match=r"mask must be \[B, 1, T, S\] with S = 5"):
        paged(q, pool_k, pool_v, read, new_k, new_v, mask[..., :4], 0.125, "auto")
    with pytest.raises(RuntimeError, match="read_slots must be a contiguous int64"):
        paged(q, pool_k, pool_v, read.int(), new_k, new_v, mask, 0.125, "auto")
