"""llama.cpp's own KV cache types (labkit.engines.llama_kv) over SmolLM2's tokens of data/eval's text: the
rows come in order, the f32 reference agrees with itself, q8_0 moves the distribution less than q4_0, and
the bytes are GGML's. No timing is asserted. Skipped where `make engines` has not run (failed in CI)."""

import os

import pytest

from labkit.engines import llamacpp_installed
from labkit.engines.install import MAKE_ENGINES
from labkit.engines.llama_kv import kv_type_bytes_per_token, llama_kv_quality
from labkit.models.eval_data import eval_ids
from labkit.models.loading import load_tokenizer


@pytest.fixture(scope="module")
def quality():
    if not llamacpp_installed():
        message = f"llama.cpp (llama-cpp-python) is not installed. {MAKE_ENGINES}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the real-engine tests must run in CI, but {message}", pytrace=False)
        pytest.skip(message)
    ids = eval_ids(load_tokenizer("smollm2-135m"), 256)[0].tolist()
    return llama_kv_quality(ids, ("q8_0", "q4_0"), batch=64)  # 4 batches: the cache is read across them


def test_rows_come_reference_first_then_in_the_order_asked(quality):
    assert [row.kv_dtype for row in quality.rows] == ["f32", "q8_0", "q4_0"]
    assert quality.n_tokens == 256 and quality.source == "llama.cpp, 64 tokens a batch"
    assert "perplexity" in str(quality) and "q4_0" in str(quality)


def test_the_f32_reference_agrees_with_itself(quality):
    reference = quality.row("f32")
    assert reference.kl == 0.0 and reference.top1_agreement == 1.0 and reference.ratio_to_float32 == 1.0
    assert 5 < reference.perplexity < 100  # a small model reading prose and code


def test_eight_bits_move_the_distribution_less_than_four(quality):
    assert 0 < quality.row("q8_0").kl < quality.row("q4_0").kl
    assert quality.row("q8_0").top1_agreement >= quality.row("q4_0").top1_agreement


def test_bytes_per_token_are_ggml_blocks_of_smollm2s_keys_and_values():
    numbers = 2 * 30 * 3 * 64  # K and V, 30 layers, 3 KV heads of 64
    assert kv_type_bytes_per_token("f32") == 4 * numbers == 46_080
    assert kv_type_bytes_per_token("f16") == 2 * numbers
    assert kv_type_bytes_per_token("q8_0") == numbers // 32 * 34 == 12_240
    assert kv_type_bytes_per_token("q4_0") == kv_type_bytes_per_token("q4_0-norot") == numbers // 32 * 18
    assert kv_type_bytes_per_token("q4_1") == numbers // 32 * 20 == 7_200


def test_a_wrong_kv_type_names_the_allowed_ones():
    with pytest.raises(ValueError, match="kv_type must be one of"):
        kv_type_bytes_per_token("q5_0")
    with pytest.raises(ValueError, match="f32"):
        llama_kv_quality([1, 2, 3], kv_types=("int8",))
