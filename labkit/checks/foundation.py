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
    "check_chat_string", "check_next_token_probs", "check_greedy_loop", "check_weight_traffic",
    "check_context_ratio", "check_cache_speedup",
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


def _tokens_fed(model: torch.nn.Module) -> tuple[list[int], Callable[[], None]]:
    """A list that fills with the number of tokens each forward pass of `model` is fed, and the function
    that stops recording."""
    fed: list[int] = []

    def record(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if isinstance(ids, torch.Tensor):
            fed.append(int(ids.shape[-1]))

    return fed, model.register_forward_pre_hook(record, with_kwargs=True).remove


def check_greedy_loop(fn: Callable | None, model: torch.nn.Module,
                      tokenizer: PreTrainedTokenizerBase, n_tokens: int = 8) -> bool:
    """Exercise: fn(model, prompt_ids: list[int], n_tokens) -> the n_tokens greedy token ids, with a KV cache:
    the first forward pass reads the prompt, every later one a single new token (the checker counts them)."""
    if fn is None:
        return not_attempted("your function my_greedy(model, prompt_ids, n_tokens)")
    prompt_ids = encode_prompt(tokenizer, "Once upon a time")
    expected = generate_ids(model, tokenizer, prompt_ids, max_new_tokens=n_tokens)
    fed, stop_recording = _tokens_fed(model)
    try:
        with torch.no_grad():
            got = [int(t) for t in fn(model, list(prompt_ids), n_tokens)]
    finally:
        stop_recording()
    if len(got) != len(expected):
        return verdict(False, f"return exactly {n_tokens} new token ids (not the prompt), got {len(got)}.")
    if got != expected:
        first = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
        return verdict(False, f"token {first} differs from greedy decoding (yours is {got[first]}). Append each "
                               "chosen token to the input before the next forward pass, and take argmax at "
                               "position -1.")
    if not fed:
        return verdict(False, "the tokens are right, but the checker saw no forward pass of the model it gave "
                               "you: run `model` itself, so the checker can count what each pass is fed.")
    refed = [n for n in fed[1:] if n > 1]
    if refed:
        return verdict(False, f"the tokens are right, but after the first pass your loop fed the model {refed[0]} "
                               "tokens at once: the whole sequence again. Keep the keys and values of what the "
                               "model has read in a KV cache (labkit.prefill returns one) and feed each step only "
                               "the token just chosen (labkit.decode_step).")
    return verdict(True, f"your loop matches labkit.generate, one prefill and then one token per forward pass: "
                          f"{tokenizer.decode(got)!r}.")


def _unique_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's weights in their current dtype, a tied matrix once."""
    return sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())


def check_weight_traffic(answer: float | None, model: torch.nn.Module, tokens_per_second: float) -> bool:
    """Exercise (00): at `tokens_per_second`, how many GB (10^9 bytes) of weights does decoding read per second?"""
    if answer is None:
        return not_attempted("the GB of weights read per second (weight bytes x tokens per second / 1e9)")
    weights = _unique_bytes(model)
    expected = weights * tokens_per_second / 1e9
    if abs(answer - expected) <= 0.03 * expected:
        return verdict(True, f"about {expected:.1f} GB/s. If memory traffic were the whole cost, this loop would "
                             "run as fast as your memory can stream the weights; a laptop's memory moves a few "
                             "tens of GB/s. The further below that you are, the more of each token's time goes "
                             "to something other than reading weights (notebook 07 finds what).")
    if abs(answer / 1000 - expected) <= 0.03 * expected:
        return verdict(False, "that looks like MB per second: divide by 1000 for GB.")
    if abs(answer - weights / 1e9) <= 0.03 * weights / 1e9:
        return verdict(False, "that is how much one token reads. Per second, the loop reads it once per token.")
    return verdict(False, "not yet. Each generated token reads every weight once: the bytes of the weights "
                           "(Exercise 2) times the tokens per second you measured, in units of 1e9 bytes.")


def check_context_ratio(answer: float | None, text: str, first: tuple[PreTrainedTokenizerBase, int],
                        second: tuple[PreTrainedTokenizerBase, int]) -> bool:
    """Exercise (01): how many times more of `text` fits in the first model's context than in the second's?
    first / second: (tokenizer, context length in tokens) of each model."""
    if answer is None:
        return not_attempted("how many times more of the text fits in the first model's context")
    (big_tokenizer, big_context), (small_tokenizer, small_context) = first, second
    big_tokens, small_tokens = (len(tok(text, add_special_tokens=False)["input_ids"])
                                for tok in (big_tokenizer, small_tokenizer))
    expected = (big_context / big_tokens) / (small_context / small_tokens)

    def close(value: float) -> bool:
        return abs(answer - value) <= 0.02 * abs(value)

    if close(expected):
        return verdict(True, f"{expected:.1f} times as much of this text: "
                             f"{small_tokens / big_tokens:.1f}x from the tokenizer, {big_context / small_context:.1f}x "
                             "from the context length.")
    if close(1 / expected):
        return verdict(False, "that is the ratio the other way round: divide the first model's capacity by the "
                               "second's.")
    if close(small_tokens / big_tokens) and big_context != small_context:
        return verdict(False, "that counts the tokenizers only: the two contexts hold different numbers of tokens "
                               "too.")
    if close(big_context / small_context) and big_tokens != small_tokens:
        return verdict(False, "that counts the context lengths only: the same text also costs the two tokenizers "
                               "different numbers of tokens.")
    return verdict(False, "not yet. For each model: how many copies of the text fit = context length / tokens "
                           "of the text (without special tokens); then divide the two.")


def check_cache_speedup(answer: float | None, seconds_without_cache: float | None,
                        seconds_with_cache: float | None) -> bool:
    """Exercise (02): how many times faster is the loop with a KV cache than the one that re-feeds everything?"""
    if seconds_without_cache is None or seconds_with_cache is None:
        return not_attempted("the two measured times (in seconds)")
    if answer is None:
        return not_attempted("how many times faster the cached loop is")
    expected = seconds_without_cache / seconds_with_cache
    if abs(answer - expected) <= 0.03 * expected:
        return verdict(True, f"the cache made this loop {expected:.1f}x faster. Without it, step t feeds the prompt "
                             "and every token so far; with it, one token. The longer the text, the wider the gap.")
    if abs(answer - 1 / expected) <= 0.03 / expected:
        return verdict(False, "that is the ratio the other way round: how many times longer does the loop without "
                               "a cache take?")
    if abs(answer - (seconds_without_cache - seconds_with_cache)) <= 1e-3 + 0.03 * abs(answer):
        return verdict(False, "that is the time saved, in seconds; the question asks for a ratio of the two times.")
    return verdict(False, "not yet. A speed-up is a ratio of two times: the slow loop's time over the fast one's.")
