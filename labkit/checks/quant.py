"""Exercise checkers for the quantization lab (notebook 08); same style as labkit/checks/foundation.py."""

from __future__ import annotations

from collections.abc import Callable

import gguf
import numpy as np
import torch

from labkit.checks.common import matching_hint, not_attempted, read_number, verdict
from labkit.checks.own_answer import refuse_own_answer
from labkit.checks.work import choice_verdict, progressive, refuse_unmeasured, reset, run_own
from labkit.quant.evaluation import model_nbytes
from labkit.quant.gguf_blocks import decode_q4_1, dequantize_gguf
from labkit.quant.schemes import absmax_dequantize, absmax_quantize, bits_per_weight

__all__ = ["check_absmax_quantize", "check_quantized_megabytes", "check_q4_1_decoder", "check_ceiling_share"]

# What computes an answer for the student: labkit's own, and the libraries' (torch's quantized tensors, the
# gguf package's decoders, notebook 08 calls both in view of the exercises).
ABSMAX_REFERENCES = (
    absmax_quantize,
    torch.quantize_per_channel,
    torch.quantize_per_tensor,
    torch.fake_quantize_per_channel_affine,
    torch.fake_quantize_per_tensor_affine,
)
Q4_1_REFERENCES = (
    decode_q4_1,
    dequantize_gguf,
    gguf.dequantize,
    gguf.quants.Q4_1.dequantize_blocks,
    gguf.quants.Q4_1.dequantize_rows,
)
# The checker's own Q4_1 blocks, beside the one the student passes: a scale and minimum of each sign, every
# nibble value; made by gguf.quantize from these rows.
_HIDDEN_ROWS = np.array(
    [
        [(-1) ** j * j / 7 for j in range(32)],
        [0.25 - j / 64 for j in range(32)],
        [3.0 + (j * 7 % 16) / 5 for j in range(32)],
    ],
    dtype=np.float32,
)

_EXAMPLE = torch.tensor(
    [
        [0.02, -0.51, 0.13, 0.0, 0.26, -0.07, 0.33, 0.9],
        [-0.004, 0.012, 0.008, -0.02, 0.0, 0.016, -0.001, 0.003],
    ]
)


def check_absmax_quantize(fn: Callable | None) -> bool:
    """Exercise: fn(w [rows, cols]) -> (codes int8 [rows, cols], scale [rows, 1]), int8 absmax per row.
    Calling labkit's own absmax_quantize does not count."""
    if fn is None:
        return not_attempted("your function my_absmax_int8(w)")
    got, error = run_own(fn, _EXAMPLE.clone(), references=ABSMAX_REFERENCES)
    if error:
        return verdict(False, f"your function: {error}")
    try:
        codes, scale = got
    except (TypeError, ValueError):
        return verdict(False, f"return a pair (codes, scale), got {type(got).__name__}.")
    codes, scale = torch.as_tensor(codes), torch.as_tensor(scale, dtype=torch.float32)
    if codes.shape != _EXAMPLE.shape:
        return verdict(
            False, f"codes must have the weight's shape {tuple(_EXAMPLE.shape)}, not {tuple(codes.shape)}."
        )
    miss = _absmax_scale_miss(scale) or _absmax_codes_miss(codes)
    if miss:
        return verdict(False, miss)
    error = float((absmax_dequantize(codes, scale.reshape(-1, 1)) - _EXAMPLE).abs().max())
    reset("absmax_codes")
    return verdict(
        True,
        f"codes and scales match labkit.quant.schemes.absmax_quantize; the worst round-trip error is "
        f"{error:.2e}, within half a step.",
    )


def _absmax_scale_miss(scale: torch.Tensor) -> str | None:
    """The hint for a wrong scale of _EXAMPLE (one per row, max|w| / 127), None when it is right."""
    _, expected = absmax_quantize(_EXAMPLE, bits=8, granularity="channel")
    if scale.numel() == 1:
        return (
            "one scale for the whole tensor: the second row's weights are tiny, and with the first row's "
            "scale they all round to a few codes. Give each row its own scale."
        )
    if torch.allclose(scale.reshape(-1), (_EXAMPLE.abs().amax(1) / 128), rtol=1e-4):
        return (
            "divide max|w| by 127, not 128: int8 codes run from -127 to 127 so that zero sits in the middle "
            "and the range is symmetric."
        )
    if not torch.allclose(scale.reshape(-1), expected.reshape(-1), rtol=1e-4):
        return "the scale of each row is max|w| of that row divided by 127."
    return None


def _absmax_codes_miss(codes: torch.Tensor) -> str | None:
    """The hint for wrong codes of _EXAMPLE (whole numbers, rounded to the nearest step, stored as int8), None
    when they are right; a miss on their values counts toward the exercise's progressive hints."""
    expected, scale = absmax_quantize(_EXAMPLE, bits=8, granularity="channel")
    if codes.is_floating_point() and not torch.equal(codes, codes.round()):
        return "the codes are not whole numbers yet: a code is an integer, stored as int8."
    if not torch.equal(codes.to(torch.int64), expected.to(torch.int64)):
        if torch.equal(torch.trunc(_EXAMPLE / scale).to(torch.int64), codes.to(torch.int64)):
            return (
                "that truncates toward zero; round to the nearest code instead, so the error is never more "
                "than half a step."
            )
        return progressive(
            "absmax_codes",
            [
                "some codes differ: each code is the weight measured in steps of its row's scale, to the nearest step.",
                "some codes differ: codes = round(w / scale), clamped to [-127, 127].",
            ],
        )
    if codes.dtype != torch.int8:
        return f"the values are right; store the codes as torch.int8 (1 byte each), not {codes.dtype}."
    return None


def quantized_megabytes_verdict(
    answer: float | None, n_weights: int, bits: int = 4, group_size: int = 32
) -> bool:
    """Exercise: MB (10^6 bytes) of n_weights stored with `bits`-bit codes and one float16 scale per group."""
    if answer is None:
        return not_attempted("the size in MB (codes plus one 16-bit scale per group)")
    expected = n_weights * bits_per_weight(bits, group_size) / 8 / 1e6
    codes_only = n_weights * bits / 8 / 1e6
    if abs(answer - expected) <= 0.005 * expected:
        reset("quantized_megabytes")
        return verdict(
            True,
            f"{expected:,.1f} MB: {bits_per_weight(bits, group_size)} bits per weight, "
            f"{32 / bits_per_weight(bits, group_size):.1f}x smaller than float32.",
        )
    if abs(answer - codes_only) <= 0.005 * codes_only:
        return verdict(
            False,
            f"that counts the {bits}-bit codes only; each group of {group_size} weights "
            "also stores a 16-bit scale (2 bytes).",
        )
    if abs(answer / 1e6 - expected) <= 0.005 * expected:
        return verdict(False, "that looks like bytes, not megabytes: divide by 1e6.")
    if abs(answer * 8 - expected) <= 0.005 * expected:
        return verdict(False, "that looks like megabits: divide the number of bits by 8 to get bytes.")
    return verdict(
        False,
        progressive(
            "quantized_megabytes",
            [
                f"{answer:,.1f} MB is not it. Count what each weight costs on average, its code and its share of its "
                "group's scale, then the bytes of all of them.",
                f"{answer:,.1f} MB is not it. Bits per weight = {bits} + 16 / {group_size}; multiply by the number of "
                "weights and divide by 8 (bytes) and by 1e6 (MB).",
            ],
        ),
    )


# Notebook 08's Exercise 2: the checker owns its problem, so an answer to a problem a student changed
# counts for nothing; quantized_megabytes_verdict checks any other (the tests' cases).
QUANTIZED_MEGABYTES_PROBLEM = {"n_weights": 106_168_320, "bits": 4, "group_size": 64}


def check_quantized_megabytes(answer: float | None) -> bool:
    """Exercise (08, Exercise 2): MB of SmolLM2's 106,168,320 linear weights as 4-bit codes, one float16 scale per 64? (QUANTIZED_MEGABYTES_PROBLEM)."""
    if (refused := refuse_own_answer(answer, "check_quantized_megabytes", ["bits_per_weight"])) is not None:
        return refused
    return quantized_megabytes_verdict(answer, **QUANTIZED_MEGABYTES_PROBLEM)


def check_q4_1_decoder(fn: Callable | None, raw_block: np.ndarray | torch.Tensor) -> bool:
    """Exercise: fn(raw_block, a numpy uint8 array of 20 bytes) -> the block's 32 values (d * q + m), on
    the student's block and on the checker's own (made from _HIDDEN_ROWS). Calling labkit's decode_q4_1 or
    the gguf package's decoders does not count."""
    if fn is None:
        return not_attempted("your function my_decode_q4_1(raw_block)")
    hidden = gguf.quantize(_HIDDEN_ROWS, gguf.GGMLQuantizationType.Q4_1)
    blocks = [np.asarray(raw_block, dtype=np.uint8).reshape(-1), *hidden]
    for number, block in enumerate(blocks):
        miss = _q4_1_miss(fn, torch.as_tensor(block.copy()))
        if miss:
            where = "your block" if number == 0 else "one of the checker's own blocks (not shown)"
            return verdict(False, f"on {where}: {miss}")
    reset("q4_1_decoder")
    return verdict(
        True,
        f"your decoder matches labkit.quant.gguf_blocks.decode_q4_1 (and so the gguf package) on your block "
        f"and {len(hidden)} of the checker's own.",
    )


def _q4_1_miss(fn: Callable, block: torch.Tensor) -> str | None:
    """None when fn decodes the 20-byte Q4_1 `block` right; else what is wrong with it."""
    expected = decode_q4_1(block)
    result, error = run_own(fn, block.numpy().copy(), references=Q4_1_REFERENCES)
    if error:
        return f"your function: {error}"
    try:
        got = torch.as_tensor(np.asarray(result, dtype=np.float32)).reshape(-1)
    except (TypeError, ValueError) as wrong:
        return f"return the 32 values as an array or a tensor: {wrong}"
    if got.numel() != 32:
        return f"a Q4_1 block holds 32 values (16 bytes, two 4-bit codes each); you returned {got.numel()}."
    if torch.allclose(got, expected, atol=1e-6, rtol=0):
        return None
    interleaved = torch.stack([expected[:16], expected[16:]], dim=1).reshape(-1)
    if torch.allclose(got, interleaved, atol=1e-6, rtol=0):
        return (
            "right values, wrong order: GGUF puts value j in the low nibble of byte j and value "
            "j + 16 in its high nibble (all 16 low nibbles first, then the 16 high ones)."
        )
    if torch.allclose(got.sort().values, expected.sort().values, atol=1e-6, rtol=0):
        return "right values, wrong order: low nibbles (byte & 0x0F) are values 0-15, high nibbles (byte >> 4) values 16-31."
    m = float(np.frombuffer(block[2:4].numpy().tobytes(), dtype=np.float16)[0])
    if torch.allclose(got + m, expected, atol=1e-6, rtol=0):
        return "add the block's minimum m (bytes 2-3, float16) to every value: value = d * q + m."
    return progressive(
        "q4_1_decoder",
        [
            "the values differ. A block is a header (a scale and a minimum, both float16) and then 16 bytes of "
            "4-bit codes: read the header first, then two codes from each byte.",
            "the values differ. Bytes 0-1 are d and bytes 2-3 are m (both float16); bytes 4-19 hold the 4-bit codes "
            "q; value = d * q + m.",
        ],
    )


# what limits a quantized step: the choices of exercise 4
CEILING_LIMITS = {
    "reading weights": "the bytes the step reads",
    "other work": "the kernels' work per weight and the per-op overhead, beyond the reads",
}


def check_ceiling_share(
    answer: float | None,
    limited_by: str | None,
    tokens_per_s: float,
    model: torch.nn.Module,
    bandwidth: float,
) -> bool:
    """Exercise (08): what fraction of its bandwidth ceiling (bandwidth / the model's bytes, read once a token)
    does a measured decoding speed reach, and what limits the step (one of CEILING_LIMITS)? The bytes are
    read off the student's model itself; the share within 5 %."""
    value, refusal = read_number(
        answer,
        "a fraction of 1 (measured tokens/s / the ceiling's tokens/s) and what limits the step",
        others=(limited_by,),
    )
    if refusal is not None:
        return refusal
    unmeasured = refuse_unmeasured(
        "time the decoding with median_tokens_per_second(...), as the cell above does",
        tokens_per_s=tokens_per_s,
    )
    if unmeasured is not None:
        return unmeasured
    model_bytes = model_nbytes(model)
    expected = tokens_per_s * model_bytes / bandwidth
    if not abs(value - expected) <= 0.05 * expected:
        hints = _ceiling_share_slips(expected, model_bytes, bandwidth)
        return verdict(
            False,
            matching_hint(value, hints, rel_tol=0.05)
            or progressive(
                "ceiling_share",
                [
                    f"{value:g} is not what your measurement gives. The ceiling is the speed if reading the bytes were all a "
                    "step did; compare the measured speed with it.",
                    f"{value:g} is not it. The ceiling is bandwidth / bytes read per token, in tokens/s; the share is the "
                    "measured tokens/s over that.",
                ],
            ),
        )
    reset("ceiling_share")
    return choice_verdict(
        limited_by,
        CEILING_LIMITS,
        "reading weights" if expected >= 0.5 else "other work",
        "if the reads set the pace, how close to the ceiling would the step run?",
        name="limited_by",
        exercise="ceiling_share",
        right_so_far="the share is right",
        passed=f"{model_bytes / 1e6:.1f} MB read per token. Section 7's cost model splits a step "
        "into its terms and names each one's share.",
    )


def _ceiling_share_slips(expected: float, model_bytes: float, bandwidth: float) -> list[tuple[float, str]]:
    """The plausible wrong answers to check_ceiling_share, each with its hint (for matching_hint)."""
    return [
        (100 * expected, "give a fraction of 1, not a percentage."),
        (1 / expected, "that is the ceiling divided by the measured speed: the share goes the other way."),
        (
            bandwidth / model_bytes,
            "that is the ceiling itself, in tokens/s; how much of it did the step reach?",
        ),
        *[
            (
                expected * f,
                "mind the units: bytes in bytes and the bandwidth in bytes/s (1 GB/s = 1e9 bytes/s).",
            )
            for f in (1e6, 1e-6, 1e3, 1e-3)
        ],
    ]
