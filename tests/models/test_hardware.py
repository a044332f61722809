"""The calculator's hardware side: what the OS and runtime reserve, RAM apart from VRAM, tensor-parallel GPUs,
contexts longer than a model was trained for, and sliding-window layers (Gemma 3), each against a hand
computation."""

from dataclasses import replace

import pytest
import torch
import transformers

from labkit.models import sizing as memory
from labkit.models.hardware import HARDWARE, Hardware, hardware_table, reserve_bytes

GEMMA = memory.PRESETS["gemma-3-270m"]
PER_LAYER_TOKEN = 2 * 1 * 256 * 2  # keys and values x 1 KV head x head dim 256 x 2 bytes (fp16)


def row(table: str, name: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(name + " "))


def test_reserves_by_kind_of_memory():
    assert reserve_bytes(8e9, "RAM") == 3e9  # fixed: OS, desktop, browser, runtime
    assert reserve_bytes(64e9, "unified") == 16e9  # macOS lets the GPU use about 75 %
    assert reserve_bytes(80e9, "VRAM") == pytest.approx(9e9)  # vLLM's 0.9 leaves 10 %, + 1 GB CUDA context
    assert HARDWARE["laptop 8 GB"].usable_bytes == 5e9
    assert HARDWARE["Mac 64 GB"].usable_bytes == 48e9
    assert HARDWARE["RTX 4090 24 GB"].usable_bytes == pytest.approx(20.6e9)
    assert HARDWARE["8 x H100 80 GB"].usable_bytes == pytest.approx(8 * 71e9)
    assert HARDWARE["8 x H100 80 GB"].bandwidth == pytest.approx(8 * 3.35e12)
    assert Hardware("tiny", 2e9, "RAM").usable_bytes == 0  # the reserve takes it all
    with pytest.raises(ValueError, match="kind must be one of RAM, unified, VRAM, budget, got 'HBM'"):
        Hardware("x", 80e9, "HBM")
    for devices in (0, 1.5, "2", True):
        with pytest.raises(ValueError, match=r"devices must be a whole number of 1 or more, got "):
            Hardware("x", 80e9, "VRAM", devices=devices)


def test_hardware_table_shows_ram_and_vram_apart():
    table = hardware_table()
    assert "RAM " in row(table, "laptop 16 GB") and "13.0 GB" in row(table, "laptop 16 GB")
    assert "VRAM" in row(table, "RTX 4090 24 GB") and "1,008 GB/s" in row(table, "RTX 4090 24 GB")
    assert "unified" in row(table, "Mac 64 GB") and "48.0 GB" in row(table, "Mac 64 GB")
    assert "reserve for VRAM: 10 % + 1 GB per GPU (vLLM's gpu_memory_utilization=0.9" in table


def test_memory_table_picks_ram_and_vram_after_the_reserve():
    table = memory.memory_table(tokens=8192)
    assert "RAM / unified" in table and "GPU VRAM" in table
    # 17.1 GB: more than a 16 GB laptop leaves (13.0 GB), less than an RTX 4090 leaves (20.6 GB)
    assert row(table, "llama-3.1-8b").endswith("laptop 32 GB   RTX 4090 24 GB")
    # 143.9 GB: more than 2 x 71.0 GB, so four GPUs
    assert row(table, "llama-3.1-70b").endswith("none           4 x H100 80 GB")
    assert "fits: total <= memory - reserve (RAM 3 GB, unified 25 %, VRAM 10 % + 1 GB per GPU" in table
    assert "N x GPU: tensor parallel, each GPU holds 1/N of every layer" in table
    assert "N x GPU" not in memory.memory_table(["llama-3.1-8b"], tokens=8192)  # only when a row needs it
    budget = memory.memory_table(["llama-3.1-8b"], tokens=8192, hardware={"my GPU": 24e9})  # nothing reserved
    assert row(budget, "llama-3.1-8b").endswith("my GPU") and "smallest that fits" in budget


def test_tensor_parallel_needs_heads_that_divide_by_the_gpus():
    odd = memory.ModelShape("odd", 100e9, 30, 9, 3, 64, 8192)  # 200 GB in fp16; 3 KV heads
    even = memory.ModelShape("even", 100e9, 30, 8, 4, 64, 8192)
    table = memory.memory_table([odd, even], tokens=1024)
    assert row(table, "odd").endswith("none")  # 8 x H100 has the room, but 3 heads do not split in 2, 4 or 8
    assert row(table, "even").endswith("4 x H100 80 GB")
    assert HARDWARE["2 x H100 80 GB"].splits(8, 4) and not HARDWARE["2 x H100 80 GB"].splits(9, 3)


def test_a_context_longer_than_trained_is_marked_with_a_message():
    llama2, llama3 = memory.PRESETS["llama-2-7b"], memory.PRESETS["llama-3.1-8b"]
    assert (llama2.context, llama2.context_note(4096), llama2.context_note(4097)) == (
        4096,
        "",
        "> trained 4,096",
    )
    table = memory.memory_table([llama2, llama3], tokens=8192)
    assert row(table, "llama-2-7b").endswith("> trained 4,096")
    assert "trained" not in row(table, "llama-3.1-8b")
    assert (
        "> trained N: 8,192 tokens exceed the N the model was trained for (max_position_embeddings)" in table
    )
    assert "trained" not in memory.memory_table([llama2, llama3], tokens=4096)


def test_sliding_window_layers_stop_growing_at_the_window():
    assert (GEMMA.sliding_window, GEMMA.n_local_layers, GEMMA.n_layers) == (512, 15, 18)  # 5 local : 1 global
    # within the window every layer grows; past it only the 3 global layers do
    assert GEMMA.kv_cache_bytes(300) == 18 * 300 * PER_LAYER_TOKEN
    assert GEMMA.kv_cache_bytes(8192) == (3 * 8192 + 15 * 512) * PER_LAYER_TOKEN == 33_030_144
    assert GEMMA.kv_cache_bytes(8192, batch=4, dtype="fp32") == 4 * 2 * 33_030_144
    full = GEMMA.without_sliding_window()
    assert full == memory.ModelShape("gemma-3-270m (all global)", GEMMA.n_params, 18, 4, 1, 256, 32768)
    assert full.kv_cache_bytes(8192) == 18 * 8192 * PER_LAYER_TOKEN  # 4.6x more
    big = memory.PRESETS["gemma-3-27b"]  # 62 layers: 52 local (window 1,024), 10 global; 16 KV heads of 128
    assert big.kv_cache_bytes(131072) == 2 * 16 * 128 * 2 * (10 * 131072 + 52 * 1024)
    assert "window 512 (15/18)" in row(memory.memory_table(["gemma-3-270m"], tokens=8192), "gemma-3-270m")


@pytest.mark.parametrize("free_tokens", [10, 511, 512, 513, 5000])
def test_max_tokens_with_a_sliding_window(free_tokens):
    for batch in (1, 3):
        memory_bytes = GEMMA.total_bytes(free_tokens, batch) + 100  # a few bytes to spare
        limit = GEMMA.max_tokens(memory_bytes, batch)
        assert GEMMA.total_bytes(limit, batch) <= memory_bytes < GEMMA.total_bytes(limit + 1, batch)
        assert limit == free_tokens


def test_model_shape_refuses_a_half_given_window():
    with pytest.raises(ValueError, match="sliding_window .* and n_local_layers .* must be both 0"):
        memory.ModelShape("bad", 1e6, 4, 2, 2, 8, 128, sliding_window=64)
    with pytest.raises(ValueError, match="at least one global layer"):
        memory.ModelShape("bad", 1e6, 4, 2, 2, 8, 128, sliding_window=64, n_local_layers=4)


def test_shape_of_reads_the_layer_pattern_of_a_gemma3_config():
    config = transformers.Gemma3TextConfig(
        num_hidden_layers=18,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        hidden_size=640,
        intermediate_size=2048,
        sliding_window=512,
        max_position_embeddings=32768,
        vocab_size=262144,
    )
    shape = memory.shape_of(config, "gemma-3-270m")
    assert (shape.sliding_window, shape.n_local_layers) == (512, 15)


@pytest.mark.slow
def test_gemma3_preset_and_window_are_the_real_model(gemma3):
    model = gemma3[0]
    measured = memory.shape_of(model, "gemma-3-270m")
    assert measured == replace(GEMMA, n_params=measured.n_params)
    assert measured.n_params == pytest.approx(GEMMA.n_params, rel=0.01)
    with torch.no_grad():
        cache = model(torch.arange(10, 710)[None], use_cache=True).past_key_values  # 700 tokens > the window
    real = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    # transformers keeps window - 1 = 511 tokens in a local layer between steps (the next token makes 512);
    # the calculator counts the 512 a step holds
    assert real == replace(GEMMA, sliding_window=511).kv_cache_bytes(700, 1, torch.float32)
    assert real == GEMMA.kv_cache_bytes(700, 1, torch.float32) - 15 * 2 * 256 * 4
