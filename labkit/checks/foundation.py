"""Exercise checkers: each prints a clear verdict (a pass, or a hint) and returns True or False.

A checker never raises on a wrong or missing answer, so nothing a student typed is lost, and an
exercise left as `None` reads as "not attempted yet".

    >>> checks.check_parameter_count(answer, model)
    ✅ Correct: SmolLM2 has 134,515,008 parameters.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import PreTrainedTokenizerBase

from labkit.checks.common import not_attempted, verdict
from labkit.core.text import chat_prompt, encode_prompt
from labkit.decoding.generate import generate_ids

__all__ = [
    "count_parameters", "check_parameter_count", "check_model_megabytes", "check_token_count",
    "check_chat_string", "check_next_token_probs", "check_greedy_loop",
]


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (a tied embedding and output head count once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def check_parameter_count(answer: int | None, model: torch.nn.Module) -> bool:
    """Exercise: how many parameters does the model have?"""
    if answer is None:
        return not_attempted("the number of parameters (hint: model.parameters())")
    expected = count_parameters(model)
    if answer == expected:
        return verdict(True, f"the model has {expected:,} parameters.")
    if answer == sum(p.numel() for p in model.state_dict().values()):
        return verdict(False, "the output head shares its matrix with the embedding; count it once "
                               "(model.parameters() already does).")
    return verdict(False, f"{answer:,} is not the count. Sum p.numel() over model.parameters(): every weight "
                           "matrix, bias and norm, each tensor once.")


def check_model_megabytes(answer: float | None, model: torch.nn.Module) -> bool:
    """Exercise: how many megabytes (10^6 bytes) do the weights take in their current dtype?"""
    if answer is None:
        return not_attempted("the size of the weights in MB (parameters x bytes per parameter / 1e6)")
    unique = {id(p): p for p in model.parameters()}.values()
    expected = sum(p.numel() * p.element_size() for p in unique) / 1e6
    if abs(answer - expected) <= 0.01 * expected:
        return verdict(True, f"about {expected:,.0f} MB, read from memory once per generated token.")
    if abs(answer / 1e6 - expected) <= 0.01 * expected:
        return verdict(False, "that looks like bytes, not megabytes: divide by 1e6.")
    return verdict(False, f"{answer:,.1f} MB is not it. Hint: each float32 parameter takes 4 bytes "
                           "(p.element_size()).")


def check_token_count(answer: int | None, tokenizer: PreTrainedTokenizerBase, text: str) -> bool:
    """Exercise: how many tokens is `text` for this tokenizer (without special tokens)?"""
    if answer is None:
        return not_attempted("a token count (hint: tokenizer(text, add_special_tokens=False))")
    expected = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    if answer == expected:
        return verdict(True, f"{expected} tokens.")
    if answer == len(tokenizer(text)["input_ids"]):
        return verdict(False, "that count includes special tokens such as <bos>; leave them out.")
    return verdict(False, f"{answer} is not the count. Tokenize with add_special_tokens=False and "
                           "take len() of input_ids.")


def check_chat_string(answer: str | None, tokenizer: PreTrainedTokenizerBase,
                      messages: list[dict[str, str]]) -> bool:
    """Exercise: write by hand the exact prompt string the chat template renders for `messages`."""
    if answer is None:
        return not_attempted("the prompt string you built by hand")
    expected = tokenizer.decode(chat_prompt(tokenizer, messages))
    if answer == expected:
        return verdict(True, "your string is exactly what the chat template renders.")
    return verdict(False, _chat_string_hint(answer, expected, messages))


def _chat_string_hint(answer: str, expected: str, messages: list[dict[str, str]]) -> str:
    """Where the student's prompt string leaves the template, and what to look at there, without the
    template's own text."""
    position = next((i for i, (a, b) in enumerate(zip(answer, expected)) if a != b),
                    min(len(answer), len(expected)))
    if position == len(answer):
        every_message = all(m["content"] in answer for m in messages)
        return f"your string stops at character {position} and the template goes on" + (
            ". After the last message it opens the assistant's turn, so that the model writes the reply next."
            if every_message else ": every message of the conversation is in it.")
    where = f"the strings differ from character {position}: you have {answer[position:position + 25]!r}"
    if position == len(expected):
        return f"{where}, where the template has already ended."
    if "system" in expected and not any(m["role"] == "system" for m in messages) and "system" not in answer:
        return (f"{where}. With no system message in the conversation, this template puts in a default one "
                "first: look at tokenizer.chat_template.")
    return (f"{where}. Compare with the pattern of tokenizer.chat_template: the special tokens, line breaks and "
            "spaces around each role and each message count, character by character.")


def check_next_token_probs(fn: Callable | None, model: torch.nn.Module,
                           tokenizer: PreTrainedTokenizerBase) -> bool:
    """Exercise: fn(model, input_ids [1, T]) -> probabilities [V] of the next token."""
    if fn is None:
        return not_attempted("your function next_token_probs(model, input_ids)")
    input_ids = torch.tensor([encode_prompt(tokenizer, "The capital of France is")])
    with torch.no_grad():
        expected = torch.softmax(model(input_ids).logits[0, -1].float(), dim=-1)
        got = fn(model, input_ids)
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        return verdict(False, f"return a tensor of shape {tuple(expected.shape)}, not {shape}. "
                               "Take the logits of the last position only.")
    if abs(float(got.sum()) - 1) > 1e-3:
        return verdict(False, f"probabilities must sum to 1 (yours sum to {float(got.sum()):.3f}): apply softmax.")
    if not torch.allclose(got.float(), expected, atol=1e-5):
        return verdict(False, "the values differ. Use the logits at position -1 (the next token), "
                               "softmax over the vocabulary dimension.")
    return verdict(True, f"the most likely next token is {tokenizer.decode(int(expected.argmax()))!r}.")


def check_greedy_loop(fn: Callable | None, model: torch.nn.Module,
                      tokenizer: PreTrainedTokenizerBase, n_tokens: int = 8) -> bool:
    """Exercise: fn(model, prompt_ids: list[int], n_tokens) -> the n_tokens greedy token ids."""
    if fn is None:
        return not_attempted("your function my_greedy(model, prompt_ids, n_tokens)")
    prompt_ids = encode_prompt(tokenizer, "Once upon a time")
    expected = generate_ids(model, tokenizer, prompt_ids, max_new_tokens=n_tokens)
    with torch.no_grad():
        got = [int(t) for t in fn(model, list(prompt_ids), n_tokens)]
    if got == expected:
        return verdict(True, f"your loop matches labkit.generate: {tokenizer.decode(got)!r}.")
    if len(got) != len(expected):
        return verdict(False, f"return exactly {n_tokens} new token ids (not the prompt), got {len(got)}.")
    first = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
    return verdict(False, f"token {first} differs from greedy decoding (yours is {got[first]}). Append each chosen "
                           "token to the input before the next forward pass, and take argmax at position -1.")
