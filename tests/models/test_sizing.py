"""The memory calculator: textbook figures, and the bytes of labkit's real cache tensors."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

import labkit  # noqa: E402
from labkit.core.paged import BlockPool  # noqa: E402
from labkit.models import sizing as memory  # noqa: E402
from labkit.viz import memory as viz_memory  # noqa: E402


def test_weights_of_a_7b_model():
    assert memory.weight_bytes(7e9, "fp16") == 14e9  # "a 7B model in fp16 is about 14 GB"
    assert memory.weight_bytes(7e9, torch.float32) == 28e9
    assert memory.weight_bytes(7e9, "int4") == 3.5e9
    assert memory.weight_bytes(7e9, "bf16") == memory.weight_bytes(7e9, torch.bfloat16)


def test_gguf_block_formats_count_their_scales_and_minimums():
    from labkit.quant.gguf_blocks import BLOCK_BYTES
    from labkit.quant.schemes import bits_per_weight

    # a block of 32 weights: Q4_0 keeps one fp16 scale (4.5 bits each), Q4_1 a scale and a minimum (5 bits each)
    for name, symmetric in (("q4_0", True), ("q4_1", False)):
        assert memory.bytes_per_element(name) * 32 == BLOCK_BYTES[name.upper()]
        assert memory.bytes_per_element(name) * 8 == bits_per_weight(4, group_size=32, symmetric=symmetric)
    assert memory.bytes_per_element("q4_1") * 8 == 5.0
    assert memory.bytes_per_element("q8_0") * 32 == BLOCK_BYTES["Q8_0"]


def test_kv_formula():
    # 2 x layers x KV heads x head dim x tokens x batch x bytes
    assert (
        memory.kv_cache_bytes(32, 8, 128, tokens=1000, batch=4, dtype="fp16")
        == 2 * 32 * 8 * 128 * 1000 * 4 * 2
    )
    assert memory.PRESETS["llama-2-7b"].kv_bytes_per_token("fp16") == 512 * 1024  # the classic 0.5 MiB/token
    assert memory.PRESETS["llama-3.1-8b"].kv_bytes_per_token("fp16") == 128 * 1024


@pytest.mark.slow
@pytest.mark.parametrize("batch, max_length", [(1, 1), (1, 300), (3, 128)])
def test_calculator_matches_smollm2_cache_tensors(smollm2_labkit, batch, max_length):
    shape = memory.shape_of(smollm2_labkit, "smollm2-135m")
    cache = smollm2_labkit.new_cache(batch, max_length)
    dtype = cache.keys.dtype
    assert cache.nbytes() == shape.kv_cache_bytes(max_length, batch, dtype)
    assert cache.keys.nbytes + cache.values.nbytes == shape.kv_cache_bytes(max_length, batch, dtype)
    assert cache.bytes_per_token() == batch * shape.kv_bytes_per_token(dtype)


@pytest.mark.slow
def test_calculator_matches_smollm2_after_a_real_prefill_and_in_a_paged_pool(smollm2_labkit, tokenizer):
    shape = memory.shape_of(smollm2_labkit, "smollm2-135m")
    input_ids = torch.tensor([tokenizer("The capital of France is")["input_ids"]])
    cache = smollm2_labkit.new_cache(1, 64)
    with torch.no_grad():
        smollm2_labkit(input_ids, cache)
    assert cache.used_bytes() == shape.kv_cache_bytes(input_ids.shape[1], 1, torch.float32)
    pool = BlockPool.for_model(smollm2_labkit, n_blocks=5, block_size=16)
    assert pool.nbytes() == shape.kv_cache_bytes(5 * 16, 1, torch.float32)
    # half precision: a cache of the same shape in bf16 is half the bytes, as the calculator says
    bf16 = labkit.KVCache(shape.n_layers, 2, shape.n_kv_heads, 100, shape.head_dim, dtype=torch.bfloat16)
    assert bf16.nbytes() == shape.kv_cache_bytes(100, 2, "bf16")


@pytest.mark.slow
def test_smollm2_preset_is_the_real_model(smollm2_labkit):
    measured = memory.shape_of(smollm2_labkit, "smollm2-135m")
    assert measured == memory.PRESETS["smollm2-135m"]
    assert measured.n_params == labkit.checks.count_parameters(smollm2_labkit)


def test_shape_of_a_config_counts_the_parameters_of_that_llama():
    tiny = labkit.tiny_model("labkit")
    assert memory.shape_of(tiny.config).n_params == sum(p.numel() for p in tiny.parameters())
    smollm2 = memory.shape_of(labkit.LlamaConfig(), "smollm2-135m")  # the default config is SmolLM2's
    assert smollm2 == memory.PRESETS["smollm2-135m"]


def test_grouped_query_attention_shrinks_the_cache():
    smollm2 = memory.PRESETS["smollm2-135m"]
    assert (smollm2.n_heads, smollm2.n_kv_heads) == (9, 3)
    assert smollm2.without_gqa().kv_cache_bytes(1000) == 3 * smollm2.kv_cache_bytes(1000)


def test_max_tokens_is_where_memory_runs_out():
    llama = memory.PRESETS["llama-3.1-8b"]
    limit = llama.max_tokens(24 * memory.GB, batch=1, weights_dtype="fp16")
    assert llama.total_bytes(limit) <= 24 * memory.GB < llama.total_bytes(limit + 1)
    assert llama.max_tokens(8 * memory.GB) == 0  # the fp16 weights alone need 16 GB
    assert llama.max_tokens(24 * memory.GB, batch=4) == limit // 4


@pytest.mark.parametrize("batch", [0, -1])
def test_zero_or_negative_batch_is_a_clear_error(batch):
    with pytest.raises(ValueError, match="batch must be a whole number of sequences, at least 1"):
        memory.kv_cache_bytes(2, 2, 8, tokens=10, batch=batch)
    with pytest.raises(ValueError, match="batch must be a whole number of sequences"):
        memory.PRESETS["llama-3.1-8b"].kv_cache_bytes(10, batch=batch)


def test_other_bad_input():
    with pytest.raises(ValueError, match="tokens must be a whole number >= 0"):
        memory.kv_cache_bytes(2, 2, 8, tokens=-5)
    with pytest.raises(ValueError, match="Unknown dtype 'fp12'; use a torch dtype or one of"):
        memory.weight_bytes(1e9, "fp12")
    with pytest.raises(ValueError, match="n_params must be positive"):
        memory.weight_bytes(0)
    with pytest.raises(ValueError, match="Unknown model 'gpt-5'; presets:"):
        memory.model_shape("gpt-5")


def test_table_plot_and_slider():
    table = memory.memory_table(["llama-2-7b", "llama-3.1-8b"], tokens=4096)
    assert "llama-2-7b" in table and "13.5 GB" in table and "RTX 4090" in table
    assert memory.format_bytes(14e9) == "14.0 GB" and memory.format_bytes(512) == "512 B"
    ax = viz_memory.plot_memory_by_context("llama-3.1-8b", 24 * memory.GB, context=32768, reserve_bytes=3.4e9)
    assert ax.get_xscale() == "linear"  # KV bytes grow linearly with tokens
    assert any("usable: 20.6 GB" in text.get_text() for text in ax.get_legend().get_texts())
    slider = viz_memory.context_slider("llama-3.1-8b", memory_gb=24, reserve_gb=3.4)
    assert repr(slider) == "ContextSlider(llama-3.1-8b; run the notebook to move the slider)"
    assert (slider.slider.min, slider.slider.step, slider.slider.max) == (1024, 1024, 131072)  # linear steps
    slider.slider.value = 2048
    assert slider.fits() and "fits" in slider.text.value and "20.6 GB left of 24 GB" in slider.text.value
    slider.slider.value = 131072
    assert not slider.fits() and "not</b> fit" in slider.text.value
    assert slider.chart.value[:4] == b"\x89PNG"
    slider.slider.value = 32768  # 20.4 GB: fits in the 20.6 GB left, not in the 16 GB an 8 GB reserve leaves
    assert slider.total_bytes() <= 24 * memory.GB and slider.fits()
    slider.reserve_gb.value = 8.0
    assert not slider.fits()


def test_memory_table_layout_stays_as_the_notebooks_print_it():
    """Notebooks 06 and 07 print memory_table in their saved outputs: the columns line up, a row without a note
    ends at its last pick, and the footnotes say what the notes mean."""
    table = memory.memory_table(
        ["llama-2-7b", "smollm2-135m", "gemma-3-270m"], tokens=8192, hardware={"my GPU": 24e9}
    )
    assert table.splitlines() == [
        "weights fp16, KV cache fp16, 8,192 tokens x batch 1",
        "model           weights   KV/token   KV cache      total  smallest that fits  note",
        "llama-2-7b      13.5 GB   524.3 KB     4.3 GB    17.8 GB  my GPU              > trained 4,096",
        "smollm2-135m   269.0 MB    23.0 KB   188.7 MB   457.8 MB  my GPU",
        "gemma-3-270m   536.0 MB    18.4 KB    33.0 MB   569.0 MB  my GPU              window 512 (15/18)",
        "> trained N: 8,192 tokens exceed the N the model was trained for (max_position_embeddings): answers may "
        "degrade",
        "window W (L/N): L of the N layers keep only the last W tokens: their cache stops growing at W",
    ]


def test_plot_shades_the_context_a_model_was_not_trained_for():
    ax = viz_memory.plot_memory_by_context("llama-2-7b", 80 * memory.GB, max_tokens=16384)
    assert ax.get_xlim() == (0, 16384)
    assert any("beyond trained 4,096" in text.get_text() for text in ax.get_legend().get_texts())
