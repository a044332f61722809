"""Exercise checkers pass right answers, give a hint for wrong ones, and never raise."""

import pytest
import torch

import labkit
from labkit import checks


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
    text = "Tokenizers split text into pieces."
    n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert checks.check_token_count(n, tokenizer, text)
    assert not checks.check_token_count(n + 3, tokenizer, text)
    assert "add_special_tokens=False" in capsys.readouterr().out


def test_chat_string(tokenizer, capsys):
    messages = [{"role": "user", "content": "Hi"}]
    right = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
             "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert checks.check_chat_string(right, tokenizer, messages)
    assert not checks.check_chat_string("<|im_start|>user\nHi<|im_end|>\n", tokenizer, messages)
    assert "differ from character 12" in capsys.readouterr().out


def test_next_token_probs(tiny_hf, tokenizer, capsys):
    def right(model, input_ids):
        return torch.softmax(model(input_ids).logits[0, -1], dim=-1)

    def all_positions(model, input_ids):
        return torch.softmax(model(input_ids).logits[0], dim=-1)

    def raw_logits(model, input_ids):
        return model(input_ids).logits[0, -1]

    assert checks.check_next_token_probs(right, tiny_hf, tokenizer)
    assert not checks.check_next_token_probs(all_positions, tiny_hf, tokenizer)
    assert "last position only" in capsys.readouterr().out
    assert not checks.check_next_token_probs(raw_logits, tiny_hf, tokenizer)
    assert "apply softmax" in capsys.readouterr().out


@pytest.mark.slow
def test_greedy_loop(smollm2, capsys):
    model, tokenizer = smollm2  # a random tiny_hf model repeats one token, which hides a missing append

    def right(model, prompt_ids, n_tokens):
        logits, cache = labkit.prefill(model, torch.tensor([prompt_ids]))
        new_ids = []
        for _ in range(n_tokens):
            new_ids.append(int(logits[0].argmax()))
            logits = labkit.decode_step(model, torch.tensor([new_ids[-1]]), cache)
        return new_ids

    def without_cache(model, prompt_ids, n_tokens):
        ids = list(prompt_ids)
        for _ in range(n_tokens):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        return ids[len(prompt_ids):]

    def forgets_to_append(model, prompt_ids, n_tokens):
        return [int(model(torch.tensor([prompt_ids])).logits[0, -1].argmax())] * n_tokens

    assert checks.check_greedy_loop(right, model, tokenizer)
    assert not checks.check_greedy_loop(forgets_to_append, model, tokenizer)
    assert "Append each chosen token" in capsys.readouterr().out
    assert not checks.check_greedy_loop(without_cache, model, tokenizer)
    assert "KV cache" in capsys.readouterr().out


def test_weight_traffic(tiny_hf, capsys):
    gigabytes = checks.count_parameters(tiny_hf) * 4 / 1e9  # float32
    assert checks.check_weight_traffic(gigabytes * 20, tiny_hf, 20.0)
    assert not checks.check_weight_traffic(gigabytes * 20 * 1000, tiny_hf, 20.0)
    assert "MB per second" in capsys.readouterr().out
    assert not checks.check_weight_traffic(gigabytes, tiny_hf, 20.0)
    assert "once per token" in capsys.readouterr().out


def test_context_ratio(tokenizer, capsys):
    text = "Tokenizers split text into pieces."
    assert checks.check_context_ratio(4.0, text, (tokenizer, 32768), (tokenizer, 8192))
    assert not checks.check_context_ratio(0.25, text, (tokenizer, 32768), (tokenizer, 8192))
    assert "other way round" in capsys.readouterr().out


def test_cache_speedup(capsys):
    assert not checks.check_cache_speedup(None, None, 1.0)
    assert "Not attempted" in capsys.readouterr().out
    assert checks.check_cache_speedup(4.0, 6.0, 1.5)
    assert not checks.check_cache_speedup(0.25, 6.0, 1.5)
    assert "other way round" in capsys.readouterr().out
    assert not checks.check_cache_speedup(4.5, 6.0, 1.5)
    assert "time saved" in capsys.readouterr().out
