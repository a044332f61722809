"""Bad input at the door of labkit.models: load_model, load_tokenizer and tiny_model refuse a bad argument
before anything heavy is touched, and the sizing functions refuse a bad one with a ValueError (bad value)
or TypeError (wrong type) that names it."""

import pytest
import torch

import labkit
import labkit.models.loading
from labkit.models import sizing

# --- load_model: refused before anything heavy is touched -------------------------------------------------


@pytest.fixture
def nothing_heavy(monkeypatch):
    """Converting, reading weights or a tokenizer would mean the bad argument was checked too late."""

    def heavy(*args, **kwargs):
        raise AssertionError("load_model touched a model or tokenizer before checking its arguments")

    class NoAutoModel:
        from_pretrained = staticmethod(heavy)

    monkeypatch.setattr(labkit.models.loading, "build_cache", heavy)
    monkeypatch.setattr(labkit.models.loading, "load_tokenizer", heavy)
    monkeypatch.setattr(labkit.models.loading, "AutoModelForCausalLM", NoAutoModel)


@pytest.mark.usefixtures("nothing_heavy")
@pytest.mark.parametrize(
    "arguments, error, match",
    [
        pytest.param(
            {"name_or_path": None}, TypeError, "model name must be a non-empty string", id="name-None"
        ),
        pytest.param(
            {"name_or_path": 3}, TypeError, "model name must be a non-empty string.* got 3", id="name-int"
        ),
        pytest.param(
            {"name_or_path": "  "}, TypeError, "model name must be a non-empty string", id="name-blank"
        ),
        pytest.param(
            {"name_or_path": "no-such-model"},
            KeyError,
            "Unknown embedded model 'no-such-model'. Known names: smollm2-135m, gemma3-270m",
            id="name-unknown",
        ),
        pytest.param({"device": "gpu"}, ValueError, "Unknown device 'gpu'", id="device-gpu"),
        pytest.param({"device": 0}, TypeError, "device must be a string", id="device-int"),
        pytest.param(
            {"device": "mps"},
            ValueError,
            "device='mps'",
            id="device-mps",
            marks=pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS"),
        ),
        pytest.param(
            {"dtype": "float64"},
            ValueError,
            "Unsupported dtype 'float64'. Allowed: float32, bfloat16, float16",
            id="dtype-float64",
        ),
        pytest.param({"dtype": torch.int8}, ValueError, "Unsupported dtype torch.int8", id="dtype-int8"),
        pytest.param({"dtype": "fp16"}, ValueError, "Unsupported dtype 'fp16'", id="dtype-fp16"),
        pytest.param({"dtype": None}, ValueError, "Unsupported dtype None", id="dtype-None"),
        pytest.param(
            {"impl": "hf"}, ValueError, "impl must be 'transformers' or 'labkit', not 'hf'", id="impl-hf"
        ),
        pytest.param({"impl": None}, ValueError, "impl must be 'transformers' or 'labkit'", id="impl-None"),
    ],
)
def test_load_model_refuses_bad_arguments_before_loading(arguments, error, match):
    arguments = {"name_or_path": "smollm2-135m", **arguments}
    with pytest.raises(error, match=match):
        labkit.load_model(**arguments)


@pytest.mark.usefixtures("nothing_heavy")
@pytest.mark.parametrize("name", [None, 3, ""])
def test_load_tokenizer_refuses_a_name_that_is_not_text(name):
    with pytest.raises(TypeError, match="model name must be a non-empty string"):
        labkit.load_tokenizer(name)


def test_tiny_model_refuses_an_unknown_impl():
    with pytest.raises(ValueError, match="impl must be 'transformers' or 'labkit', not 'hf'"):
        labkit.tiny_model("hf")


# --- models/sizing.py -------------------------------------------------------------------------------------

LLAMA = sizing.PRESETS["llama-3.1-8b"]


@pytest.mark.parametrize(
    "memory_bytes,error",
    [
        (0, ValueError),
        (-24e9, ValueError),
        (float("inf"), ValueError),
        (float("nan"), ValueError),
        ("24GB", TypeError),
        (True, TypeError),
    ],
)
def test_max_tokens_refuses_a_bad_memory_budget(memory_bytes, error):
    with pytest.raises(error, match="memory_bytes must be positive"):
        LLAMA.max_tokens(memory_bytes)


@pytest.mark.parametrize(
    "batch,error", [(0, ValueError), (-2, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_max_tokens_checks_the_batch_even_when_the_weights_do_not_fit(batch, error):
    with pytest.raises(error, match="batch must be a whole number of sequences, at least 1"):
        LLAMA.max_tokens(1e9, batch=batch)  # 1 GB: the weights alone do not fit, max_tokens would be 0


@pytest.mark.parametrize(
    "tokens,error", [(-1, ValueError), (2.5, TypeError), ("8k", TypeError), (False, TypeError)]
)
def test_token_counts_are_checked(tokens, error):
    match = "tokens must be a whole number >= 0"
    with pytest.raises(error, match=match):
        sizing.kv_cache_bytes(2, 2, 8, tokens=tokens)
    with pytest.raises(error, match=match):
        LLAMA.kv_cache_bytes(tokens)
    with pytest.raises(error, match=match):
        LLAMA.total_bytes(tokens)
    with pytest.raises(error, match=match):
        sizing.memory_table(["llama-3.1-8b"], tokens=tokens)


@pytest.mark.parametrize(
    "batch,error", [(0, ValueError), (-1, ValueError), (2.0, TypeError), (None, TypeError)]
)
def test_batch_sizes_are_checked(batch, error):
    match = "batch must be a whole number of sequences, at least 1"
    with pytest.raises(error, match=match):
        LLAMA.total_bytes(100, batch=batch)
    with pytest.raises(error, match=match):
        sizing.memory_table(["llama-3.1-8b"], batch=batch)


@pytest.mark.parametrize(
    "n_params,error",
    [
        (0, ValueError),
        (-7e9, ValueError),
        (float("nan"), ValueError),
        ("7B", TypeError),
        (None, TypeError),
        (True, TypeError),
    ],
)
def test_parameter_counts_are_checked(n_params, error):
    with pytest.raises(error, match="n_params must be positive"):
        sizing.weight_bytes(n_params)
    with pytest.raises(error, match="n_params must be positive"):
        sizing.ModelShape("bad", n_params, 2, 2, 2, 8, 128)


@pytest.mark.parametrize("field", ["n_layers", "n_heads", "n_kv_heads", "head_dim", "context"])
@pytest.mark.parametrize(
    "value,error", [(0, ValueError), (-2, ValueError), (2.5, TypeError), (True, TypeError)]
)
def test_model_shape_refuses_bad_sizes(field, value, error):
    sizes = {"n_layers": 2, "n_heads": 2, "n_kv_heads": 2, "head_dim": 8, "context": 128, field: value}
    with pytest.raises(error, match=rf"^{field} must be a whole number >= 1"):
        sizing.ModelShape("bad", 1e6, **sizes)


@pytest.mark.parametrize("name", ["n_layers", "n_kv_heads", "head_dim"])
def test_kv_cache_bytes_refuses_bad_model_sizes(name):
    sizes = {"n_layers": 2, "n_kv_heads": 2, "head_dim": 8, name: 0}
    with pytest.raises(ValueError, match=rf"{name} must be a whole number >= 1, got 0"):
        sizing.kv_cache_bytes(**sizes, tokens=10)


@pytest.mark.parametrize("size,error", [(0, ValueError), (-8e9, ValueError), ("8 GB", TypeError)])
def test_memory_table_refuses_a_bad_hardware_budget(size, error):
    with pytest.raises(error, match=r"hardware\['tiny'\] \(bytes\) must be positive"):
        sizing.memory_table(["llama-3.1-8b"], hardware={"tiny": size})


def test_memory_table_and_shape_of_refuse_objects_of_the_wrong_kind():
    with pytest.raises(TypeError, match="models must hold model names or ModelShapes, got a int"):
        sizing.memory_table([8])
    with pytest.raises(TypeError, match="model_or_config: object has no n_layers or num_hidden_layers"):
        sizing.shape_of(object())


def test_good_input_still_gives_the_textbook_numbers():
    assert LLAMA.max_tokens(8 * sizing.GB) == 0  # the fp16 weights alone need 16 GB
    assert LLAMA.max_tokens(24 * sizing.GB, batch=4) == LLAMA.max_tokens(24 * sizing.GB) // 4
    assert sizing.kv_cache_bytes(32, 8, 128, tokens=0) == 0
    assert LLAMA.without_gqa().n_kv_heads == 32
    assert "llama-3.1-8b" in sizing.memory_table(["llama-3.1-8b"], hardware={"tiny": 1})
