"""Exercise checkers pass right answers, give a hint for wrong ones, and never raise."""

import pytest
import torch

import labkit
from labkit import checks
from labkit.checks import foundation

CHANGED = "not the exercise's own"
OWN_MODEL = "SmolLM2-135M as loaded at the top of the notebook"


@pytest.mark.slow
def test_parameter_count(smollm2, capsys):
    model = smollm2[0]
    expected = checks.count_parameters(model)
    assert checks.check_parameter_count(expected, model)
    assert not checks.check_parameter_count(expected + 1, model)
    tied_twice = sum(p.numel() for p in model.state_dict().values())
    assert not checks.check_parameter_count(tied_twice, model)
    assert "count it once" in capsys.readouterr().out
    assert not checks.check_parameter_count(None, model)
    assert "Not attempted yet" in capsys.readouterr().out


@pytest.mark.slow
def test_model_megabytes(smollm2, capsys):
    model = smollm2[0]
    megabytes = checks.count_parameters(model) * 4 / 1e6
    assert checks.check_model_megabytes(megabytes, model)
    assert not checks.check_model_megabytes(megabytes * 1e6, model)
    assert "bytes, not megabytes" in capsys.readouterr().out


def test_the_exercises_of_00_refuse_another_model(tiny, tiny_hf, capsys):
    """Notebook 00's exercises are set on SmolLM2-135M: a tiny model's right answer counts for nothing, in
    transformers' implementation or labkit's."""
    for model in (tiny_hf, tiny):
        assert not checks.check_parameter_count(checks.count_parameters(model), model)
        assert not checks.check_model_megabytes(checks.count_parameters(model) * 4 / 1e6, model)
    out = capsys.readouterr().out
    assert out.count(f"model is {CHANGED}") == 4 and out.count(OWN_MODEL) == 4, out


@pytest.mark.slow
def test_the_exercises_of_00_are_smollm2_in_float32(smollm2, smollm2_labkit, capsys):
    """labkit's Llama on SmolLM2's weights is the same problem; SmolLM2 cast to bfloat16 is the same for the
    count, but its megabytes are another problem's answer."""
    count = checks.count_parameters(smollm2[0])
    assert checks.check_parameter_count(count, smollm2_labkit)
    assert checks.check_model_megabytes(count * 4 / 1e6, smollm2_labkit)
    half, _ = labkit.load_model("smollm2-135m", dtype="bfloat16")
    assert half.dtype == torch.bfloat16
    assert checks.check_parameter_count(count, half)
    capsys.readouterr()
    assert not checks.check_model_megabytes(count * 2 / 1e6, half)
    out = capsys.readouterr().out
    assert f"dtype is {CHANGED}" in out and f"{OWN_MODEL}, its weights in float32" in out, out


def test_token_count(tokenizer, capsys):
    text = foundation.TOKEN_COUNT_TEXT
    n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert checks.check_token_count(n, tokenizer, text)
    assert not checks.check_token_count(n + 3, tokenizer, text)
    assert "add_special_tokens=False" not in capsys.readouterr().out  # the first miss names the idea
    assert not checks.check_token_count(n + 3, tokenizer, text)
    assert "add_special_tokens=False" in capsys.readouterr().out


def test_chat_string(tokenizer, capsys):
    messages = foundation.CHAT_CONVERSATION
    right = (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    )
    right += "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    right += "<|im_start|>assistant\n"
    assert checks.check_chat_string(right, tokenizer, messages)
    assert not checks.check_chat_string("<|im_start|>user\nHi<|im_end|>\n", tokenizer, messages)
    assert "differ from character 12" in capsys.readouterr().out


def test_the_exercises_of_01_refuse_a_changed_problem(tokenizer, capsys):
    """The right answer to another text, conversation or context length counts for nothing."""
    short = [{"role": "user", "content": "Hi"}]
    short_right = tokenizer.apply_chat_template(short, tokenize=False, add_generation_prompt=True)
    assert not checks.check_chat_string(short_right, tokenizer, short)
    assert not checks.check_token_count(0, tokenizer, "")
    text = foundation.CONTEXT_RATIO_TEXT
    assert not checks.check_context_ratio(1.0, text, (tokenizer, 8192), (tokenizer, 8192), "tokenizer")
    assert capsys.readouterr().out.count("not the exercise's own") == 3


@pytest.fixture
def measured(monkeypatch):
    """The checker's own measurements, fixed: decoding runs at 20 tokens/s, memory reads 20 GB/s."""
    monkeypatch.setattr(foundation, "decode_tokens_per_second", lambda model: 20.0)
    monkeypatch.setattr(foundation, "memory_read_bandwidth", lambda: 20e9)


def test_weight_traffic(tiny_hf, capsys, measured):
    gigabytes = checks.count_parameters(tiny_hf) * 4 / 1e9  # float32
    assert not checks.check_weight_traffic(gigabytes * 20 * 1000, tiny_hf, 20.0)
    assert "MB per second" in capsys.readouterr().out
    assert not checks.check_weight_traffic(gigabytes, tiny_hf, 20.0)
    assert "once per token" in capsys.readouterr().out
    # the number alone is not the exercise
    assert not checks.check_weight_traffic(gigabytes * 20, tiny_hf, 20.0)
    assert "limited_by" in capsys.readouterr().out


def test_weight_traffic_interpretation_is_checked_against_this_machine(
    tiny_hf, capsys, measured, monkeypatch
):
    traffic = checks.count_parameters(tiny_hf) * 4 * 20.0 / 1e9
    monkeypatch.setattr(foundation, "memory_read_bandwidth", lambda: traffic * 1e9 * 10)  # 10 % of the memory
    assert not checks.check_weight_traffic(traffic, tiny_hf, 20.0, limited_by="memory")
    assert "does not fit your measurement" in capsys.readouterr().out
    assert not checks.check_weight_traffic(traffic, tiny_hf, 20.0, limited_by="bandwidth")
    assert "choose one of" in capsys.readouterr().out
    assert checks.check_weight_traffic(traffic, tiny_hf, 20.0, limited_by="other")
    passed = capsys.readouterr().out
    assert "10%" in passed  # what the student could not know: the share of this machine's memory speed
    for interpretation in ("other than reading", "limits", "something else", "overhead"):
        assert interpretation not in passed
    monkeypatch.setattr(foundation, "memory_read_bandwidth", lambda: traffic * 1e9 * 1.1)  # 91 % of it
    assert checks.check_weight_traffic(traffic, tiny_hf, 20.0, limited_by="memory")


@pytest.mark.slow
def test_first_miss_names_the_idea_a_later_one_the_recipe(smollm2, capsys):
    model = smollm2[0]
    expected = checks.count_parameters(model)
    assert not checks.check_parameter_count(expected + 7, model)
    first = capsys.readouterr().out
    assert not checks.check_parameter_count(expected + 7, model)
    second = capsys.readouterr().out
    assert "numel" not in first and "model.parameters()" not in first
    assert "p.numel()" in second


def test_context_ratio(tokenizer, capsys):
    text = foundation.CONTEXT_RATIO_TEXT
    assert not checks.check_context_ratio(4.0, text, (tokenizer, 32768), (tokenizer, 8192))
    assert "matters_more" in capsys.readouterr().out  # the ratio is right; the reading is still to give
    assert not checks.check_context_ratio(4.0, text, (tokenizer, 32768), (tokenizer, 8192), "tokenizer")
    assert "does not fit" in capsys.readouterr().out
    assert checks.check_context_ratio(4.0, text, (tokenizer, 32768), (tokenizer, 8192), "context")
    assert "context length" not in capsys.readouterr().out  # the pass leaves the reading to the student
    assert not checks.check_context_ratio(0.25, text, (tokenizer, 32768), (tokenizer, 8192))
    assert "other way round" in capsys.readouterr().out


def test_weight_traffic_refuses_an_invented_speed(tiny_hf, capsys, measured):
    invented = 200.0  # ten times what the checker measured
    traffic = checks.count_parameters(tiny_hf) * 4 * invented / 1e9
    assert not checks.check_weight_traffic(traffic, tiny_hf, invented, "other")
    assert "3 times off" in capsys.readouterr().out


def test_weight_traffic_times_decoding_for_real(tiny_hf, capsys):
    """A made-up 0.001 tokens/s fails against the checker's real timing of the tiny model (thousands a second)."""
    traffic = checks.count_parameters(tiny_hf) * 4 * 0.001 / 1e9
    assert not checks.check_weight_traffic(traffic, tiny_hf, 0.001, "other")
    assert "3 times off" in capsys.readouterr().out
