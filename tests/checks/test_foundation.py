"""Exercise checkers pass right answers, give a hint for wrong ones, and never raise."""

import pytest

from labkit import checks
from labkit.checks import foundation


def test_parameter_count(tiny_hf, capsys):
    expected = checks.count_parameters(tiny_hf)
    assert checks.check_parameter_count(expected, tiny_hf)
    assert not checks.check_parameter_count(expected + 1, tiny_hf)
    tied_twice = sum(p.numel() for p in tiny_hf.state_dict().values())
    assert not checks.check_parameter_count(tied_twice, tiny_hf)
    assert "count it once" in capsys.readouterr().out
    assert not checks.check_parameter_count(None, tiny_hf)
    assert "Not attempted yet" in capsys.readouterr().out


def test_model_megabytes(tiny_hf, capsys):
    megabytes = checks.count_parameters(tiny_hf) * 4 / 1e6
    assert checks.check_model_megabytes(megabytes, tiny_hf)
    assert not checks.check_model_megabytes(megabytes * 1e6, tiny_hf)
    assert "bytes, not megabytes" in capsys.readouterr().out


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
    assert not checks.check_weight_traffic(
        gigabytes * 20, tiny_hf, 20.0
    )  # the number alone is not the exercise
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


def test_first_miss_names_the_idea_a_later_one_the_recipe(tiny_hf, capsys):
    expected = checks.count_parameters(tiny_hf)
    assert not checks.check_parameter_count(expected + 7, tiny_hf)
    first = capsys.readouterr().out
    assert not checks.check_parameter_count(expected + 7, tiny_hf)
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
