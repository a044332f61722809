"""Exercise checkers of notebooks 00-01 (02's are in generation.py): each prints a clear verdict (a pass, or a
hint) and returns True or False.

A checker never raises on a wrong or missing answer, so nothing a student typed is lost, and an
exercise left as `None` reads as "not attempted yet". A first miss names the idea; a later one says more
(work.progressive). Where a student interprets a measurement, the interpretation is a checked choice.

    >>> checks.check_parameter_count(answer, model)
    ✅ Correct: SmolLM2 has 134,515,008 parameters.
"""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedTokenizerBase

from labkit.checks.common import matching_hint, not_attempted, verdict
from labkit.checks.own_answer import refuse_own_answer
from labkit.checks.work import choice_verdict, progressive, refuse_changed_problem, refuse_other_model, reset
from labkit.core.forward import decode_step, prefill
from labkit.core.text import chat_prompt

__all__ = [
    "count_parameters",
    "check_parameter_count",
    "check_model_megabytes",
    "check_token_count",
    "check_chat_string",
    "check_weight_traffic",
    "check_context_ratio",
]

# a student's speed may differ from the checker's own re-run by this factor (a loaded machine)
TIMING_FACTOR = 3.0
# a loop that reads its weights at 75 % of a plain read's speed or more is memory-bound
MEMORY_BOUND_SHARE = 0.75
# Shares of the read bandwidth where either answer stands: another program reading memory at the same time
# slows the checker's read and the student's loop by different amounts, so near 0.75 the verdict would
# follow the machine's load, not the student's reasoning (a CI run with two test workers refused the saved
# solution's "other"; its log did not say whether this verdict or the timing check refused it).
NEAR_THRESHOLD = (0.5, 1.0)
MATTERS_MORE = {"tokenizer": "the tokens the text costs each model", "context": "the context lengths"}
LIMITED_BY = {
    "memory": "reading the weights from memory sets the loop's pace",
    "other": "something else does: computing, or running hundreds of small operations",
}


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (a tied embedding and output head count once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def check_parameter_count(answer: int | None, model: torch.nn.Module) -> bool:
    """Exercise (00): how many parameters does the model (SmolLM2-135M) have?"""
    if answer is None:
        return not_attempted("the number of parameters (hint: model.parameters())")
    if (changed := refuse_other_model(model)) is not None:
        return changed
    expected = count_parameters(model)
    if answer == expected:
        reset("parameter_count")
        return verdict(True, f"the model has {expected:,} parameters.")
    if answer == sum(p.numel() for p in model.state_dict().values()):
        return verdict(
            False,
            "the output head shares its matrix with the embedding; count it once "
            "(model.parameters() already does).",
        )
    return verdict(
        False,
        f"{answer:,} is not the count. "
        + progressive(
            "parameter_count",
            [
                "Count the numbers in every tensor the model learns: every weight matrix, bias and norm, each once.",
                "Sum p.numel() over model.parameters(): every weight matrix, bias and norm, each tensor once.",
            ],
        ),
    )


def check_model_megabytes(answer: float | None, model: torch.nn.Module) -> bool:
    """Exercise (00): how many megabytes (10^6 bytes) do the weights of SmolLM2-135M take in float32, the
    dtype it was loaded in?"""
    if answer is None:
        return not_attempted("the size of the weights in MB")
    if (changed := refuse_other_model(model, dtype=torch.float32)) is not None:
        return changed
    expected = _unique_bytes(model) / 1e6
    if abs(answer - expected) <= 0.01 * expected:
        return verdict(True, f"about {expected:,.0f} MB, read from memory once per generated token.")
    if abs(answer / 1e6 - expected) <= 0.01 * expected:
        return verdict(False, "that looks like bytes, not megabytes: divide by 1e6.")
    return verdict(
        False,
        f"{answer:,.1f} MB is not it. "
        + progressive(
            "model_megabytes",
            [
                "A parameter takes more than one byte: what does one take in the weights' dtype?",
                "Each float32 parameter takes 4 bytes (p.element_size()), and 1 MB is 1e6 bytes.",
            ],
        ),
    )


# The problems notebook 01's exercises set: a call that passes another counts for nothing.
TOKEN_COUNT_TEXT = "The weather in Zürich is lovely today ☀️"
CHAT_CONVERSATION = [
    {"role": "user", "content": "Name a prime number."},
    {"role": "assistant", "content": "7"},
    {"role": "user", "content": "And an even one?"},
]
CONTEXT_RATIO_TEXT = "東京は日本の首都です。春には桜が咲き、多くの人が公園で花見を楽しみます。"
CONTEXT_LENGTHS = (32768, 8192)  # Gemma 3's and SmolLM2's, in tokens


def check_token_count(answer: int | None, tokenizer: PreTrainedTokenizerBase, text: str) -> bool:
    """Exercise (01): how many tokens is `text` (TOKEN_COUNT_TEXT) for this tokenizer, without special tokens?"""
    if answer is None:
        return not_attempted("a token count (hint: tokenizer(text, add_special_tokens=False))")
    if (changed := refuse_changed_problem(text=(text, TOKEN_COUNT_TEXT))) is not None:
        return changed
    expected = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    if answer == expected:
        return verdict(True, f"{expected} tokens.")
    if answer == len(tokenizer(text)["input_ids"]):
        return verdict(False, "that count includes special tokens such as <bos>; leave them out.")
    return verdict(
        False,
        f"{answer} is not the count. "
        + progressive(
            "token_count",
            [
                "Count the pieces this tokenizer cuts the text into, and only those.",
                "Tokenize with add_special_tokens=False and take len() of input_ids.",
            ],
        ),
    )


def check_chat_string(
    answer: str | None, tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]
) -> bool:
    """Exercise (01): write by hand the exact prompt string the chat template renders for `messages`
    (CHAT_CONVERSATION)."""
    if (changed := refuse_changed_problem(messages=(messages, CHAT_CONVERSATION))) is not None:
        return changed
    if (
        refused := refuse_own_answer(answer, "check_chat_string", ["apply_chat_template", "chat_prompt"])
    ) is not None:
        return refused
    if answer is None:
        return not_attempted("the prompt string you built by hand")
    expected = tokenizer.decode(chat_prompt(tokenizer, messages))
    if answer == expected:
        return verdict(True, "your string is exactly what the chat template renders.")
    return verdict(False, _chat_string_hint(answer, expected, messages))


def _chat_string_hint(answer: str, expected: str, messages: list[dict[str, str]]) -> str:
    """Where the student's prompt string leaves the template, and what to look at there, without the
    template's own text."""
    position = next(
        (i for i, (a, b) in enumerate(zip(answer, expected)) if a != b), min(len(answer), len(expected))
    )
    if position == len(answer):
        every_message = all(m["content"] in answer for m in messages)
        return f"your string stops at character {position} and the template goes on" + (
            ". After the last message it opens the assistant's turn, so that the model writes the reply next."
            if every_message
            else ": every message of the conversation is in it."
        )
    where = f"the strings differ from character {position}: you have {answer[position : position + 25]!r}"
    if position == len(expected):
        return f"{where}, where the template has already ended."
    if "system" in expected and not any(m["role"] == "system" for m in messages) and "system" not in answer:
        return (
            f"{where}. With no system message in the conversation, this template puts in a default one "
            "first: look at tokenizer.chat_template."
        )
    return (
        f"{where}. Compare with the pattern of tokenizer.chat_template: the special tokens, line breaks and "
        "spaces around each role and each message count, character by character."
    )


def _unique_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's weights in their current dtype, a tied matrix once."""
    return sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())


def memory_read_bandwidth() -> float:
    """Bytes/s this machine reads from memory: the better of two medians of 3 reads
    (labkit.fast.roofline.read_bandwidth).

    >>> memory_read_bandwidth() / 1e9
    19.2
    """
    from labkit.fast.roofline import read_bandwidth  # only when checked: it allocates 256 MB

    return max(read_bandwidth(repeats=3) for _ in range(2))  # the better of two: what the memory can do


def decode_tokens_per_second(model: torch.nn.Module, n_tokens: int = 16) -> float:
    """The checker's own greedy decoding speed on `model`: a 32-token prefill, then n_tokens - 1 decode steps.

    >>> decode_tokens_per_second(model)
    12.4
    """
    ids = torch.arange(1, 33)[None]  # any 32 token ids will do for timing
    with torch.no_grad():
        prefill(model, ids[:, :4], max_length=4)  # warm-up
        start = time.perf_counter()
        logits, cache = prefill(model, ids, max_length=ids.shape[1] + n_tokens)
        for _ in range(n_tokens - 1):
            logits = decode_step(model, logits.argmax(-1), cache)
        return n_tokens / (time.perf_counter() - start)


def check_weight_traffic(
    answer: float | None, model: torch.nn.Module, tokens_per_second: float, limited_by: str | None = None
) -> bool:
    """Exercise (00): at `tokens_per_second`, how many GB (10^9 bytes) of weights does decoding read per second,
    and is that what limits the loop? limited_by: "memory" or "other", checked against a read of this machine's
    memory: "memory" when the loop reads its weights at MEMORY_BOUND_SHARE of that speed or more. The checker
    times decoding on `model` again: a tokens_per_second more than TIMING_FACTOR away from its own is refused."""
    if answer is None:
        return not_attempted("the GB of weights read per second")
    mine = decode_tokens_per_second(model)
    if not mine / TIMING_FACTOR <= tokens_per_second <= mine * TIMING_FACTOR:
        return verdict(
            False,
            "the checker timed decoding on your model again, and your tokens_per_second is more "
            "than 3 times off: use the speed the cell measured on this machine.",
        )
    weights = _unique_bytes(model)
    expected = weights * tokens_per_second / 1e9
    if abs(answer - expected) > 0.03 * expected:
        if abs(answer / 1000 - expected) <= 0.03 * expected:
            return verdict(False, "that looks like MB per second: divide by 1000 for GB.")
        if abs(answer - weights / 1e9) <= 0.03 * weights / 1e9:
            return verdict(
                False, "that is how much one token reads. Per second, the loop reads it once per token."
            )
        return verdict(
            False,
            "not yet. "
            + progressive(
                "weight_traffic",
                [
                    "Each generated token reads every weight once: how many bytes is that, how many times per second?",
                    "The bytes of the weights (Exercise 2) times the tokens per second you measured, in units of 1e9 "
                    "bytes.",
                ],
            ),
        )
    if limited_by is None:
        return not_attempted(f"limited_by, one of {sorted(LIMITED_BY)} (your GB/s is right)")
    bandwidth = memory_read_bandwidth() / 1e9
    share = expected / bandwidth
    truth = "memory" if share >= MEMORY_BOUND_SHARE else "other"
    if NEAR_THRESHOLD[0] <= share <= NEAR_THRESHOLD[1] and limited_by in LIMITED_BY:
        truth = limited_by  # within a busy machine's noise of the threshold, either reading stands
    return choice_verdict(
        limited_by,
        LIMITED_BY,
        truth,
        "compare the GB/s your loop reads with what a laptop's memory moves per second.",
        name="limited_by",
        exercise="weight_traffic",
        right_so_far="your GB/s is right",
        passed=f"about {expected:.1f} GB/s. A plain read of a large tensor just ran at {bandwidth:.0f} GB/s on "
        f"this machine: the loop used {expected / bandwidth:.0%} of it.",
    )


def _context_ratio_slips(
    expected: float, big_tokens: int, small_tokens: int, contexts: tuple[int, int]
) -> list[tuple[float, str]]:
    """(what a recognised slip gives, its hint) for the context ratio; a factor that is 1 makes no slip."""
    slips = [
        (
            1 / expected,
            "that is the ratio the other way round: divide the first model's capacity by the second's.",
        )
    ]
    if contexts[0] != contexts[1]:
        slips.append(
            (
                small_tokens / big_tokens,
                "that counts the tokenizers only: the two contexts hold different numbers of tokens too.",
            )
        )
    if big_tokens != small_tokens:
        slips.append(
            (
                contexts[0] / contexts[1],
                "that counts the context lengths only: the same text also costs the two tokenizers "
                "different numbers of tokens.",
            )
        )
    return slips


def check_context_ratio(
    answer: float | None,
    text: str,
    first: tuple[PreTrainedTokenizerBase, int],
    second: tuple[PreTrainedTokenizerBase, int],
    matters_more: str | None = None,
) -> bool:
    """Exercise (01): how many times more of `text` fits in the first model's context than in the second's, and
    which factor matters more (matters_more: "tokenizer" or "context")?
    first / second: (tokenizer, context length in tokens) of each model."""
    if answer is None:
        return not_attempted("how many times more of the text fits in the first model's context")
    (big_tokenizer, big_context), (small_tokenizer, small_context) = first, second
    contexts = (big_context, small_context)
    changed = refuse_changed_problem(text=(text, CONTEXT_RATIO_TEXT), contexts=(contexts, CONTEXT_LENGTHS))
    if changed is not None:
        return changed
    big_tokens, small_tokens = (
        len(tok(text, add_special_tokens=False)["input_ids"]) for tok in (big_tokenizer, small_tokenizer)
    )
    expected = (big_context / big_tokens) / (small_context / small_tokens)
    if abs(answer - expected) <= 0.02 * expected:
        truth = "tokenizer" if small_tokens / big_tokens > big_context / small_context else "context"
        return choice_verdict(
            matters_more,
            MATTERS_MORE,
            truth,
            "your ratio is the product of two factors: compare them.",
            name="matters_more",
            exercise="context_ratio",
            right_so_far="your ratio is right",
            passed=f"{expected:.1f} times as much of this text.",
        )
    slip = matching_hint(
        answer, _context_ratio_slips(expected, big_tokens, small_tokens, contexts), rel_tol=0.02
    )
    if slip:
        return verdict(False, slip)
    return verdict(
        False,
        "not yet. "
        + progressive(
            "context_ratio",
            [
                "For each model, ask how many copies of the text fit in its context; then compare the two.",
                "For each model: copies that fit = context length / tokens of the text (without special tokens); then "
                "divide the two.",
            ],
        ),
    )
