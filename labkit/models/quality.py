"""Measuring what a model is good for: bits per byte on the evaluation text, and a small task set.

Perplexity is per token, and tokenizers differ (SmolLM2: 49k tokens, Gemma 3: 262k), so two models are
compared in **bits per byte**: the whole text's negative log-likelihood in bits over its UTF-8 bytes.
The task set is ten short factual questions, each with an automatic check (a regular expression on the
answer's first line), asked in two formats: through the chat template (what instruct models learned),
and as plain text `Question: ...\\nAnswer:` (all a base model knows).

    >>> bits_per_byte(model, tokenizer)
    1.05
    >>> task_results(model, tokenizer, chat=True)[0]
    TaskResult(question='What is the capital of France?', answer='The capital of France is Paris.', correct=True)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from labkit.core.arguments import check_int
from labkit.core.doors import check_model, check_tokenizer
from labkit.core.text import chat_prompt, encode_prompt
from labkit.decoding.generate import generate_text
from labkit.decoding.scoring import perplexity
from labkit.models.eval_data import eval_text

BPB_WINDOW = 2048  # tokens per scored window: within both models' trained context
ANSWER_TOKENS = 24

TASKS: list[tuple[str, str]] = [  # (question, a regular expression the answer's first line must match)
    ("What is the capital of France?", r"\bParis\b"),
    ("What is 7 plus 5?", r"\b12\b|\btwelve\b"),
    ("What color is the sky on a clear day?", r"\bblue\b"),
    ("What is the opposite of hot?", r"\bcold\b"),
    ("How many legs does a spider have?", r"\b8\b|\beight\b"),
    ("What is the chemical formula of water?", r"H2O|H₂O"),
    ("Which planet is known as the Red Planet?", r"\bMars\b"),
    ("What is the largest ocean on Earth?", r"\bPacific\b"),
    ("Who wrote Romeo and Juliet?", r"\bShakespeare\b"),
    ("How many days are in a week?", r"\b7\b|\bseven\b"),
]


def scored_tokens(n_tokens: int, window: int) -> int:
    """How many tokens `perplexity` predicts in non-overlapping windows (each window's first is context)."""
    return sum(
        min(window, n_tokens - start) - 1 for start in range(0, n_tokens - 1, window) if n_tokens - start >= 2
    )


def bits_per_byte(
    model: torch.nn.Module, tokenizer, text: str | None = None, window: int = BPB_WINDOW
) -> float:
    """Negative log-likelihood of `text` (default: data/eval's text) in bits per UTF-8 byte; lower is better."""
    check_model("model", model)
    check_tokenizer("tokenizer", tokenizer)
    text = eval_text() if text is None else text
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    nats = math.log(perplexity(model, ids, window)) * scored_tokens(ids.shape[1], window)
    return nats / math.log(2) / len(text.encode("utf-8"))


@dataclass(frozen=True)
class TaskResult:
    question: str
    answer: str  # the answer's first line
    correct: bool


def ask(model: torch.nn.Module, tokenizer, question: str, chat: bool) -> str:
    """The greedy answer's first non-empty line, asked through the chat template or as plain text."""
    prompt = (
        chat_prompt(tokenizer, question)
        if chat
        else encode_prompt(tokenizer, f"Question: {question}\nAnswer:")
    )
    text = generate_text(model, tokenizer, prompt, max_new_tokens=ANSWER_TOKENS, temperature=0)
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def task_results(
    model: torch.nn.Module, tokenizer, chat: bool, n_tasks: int | None = None
) -> list[TaskResult]:
    """Every task (or the first `n_tasks`, for a quick run) asked once (greedy), each answer checked by its
    regular expression: one TaskResult per task, in TASKS' order.

        >>> [r.correct for r in task_results(model, tokenizer, chat=True, n_tasks=3)]
        [True, True, True]
    """
    if n_tasks is None:  # read TASKS at the call, not at import: every question there now
        n_tasks = len(TASKS)
    check_int("n_tasks", n_tasks, minimum=1, maximum=len(TASKS), note="the questions in TASKS")
    results = []
    for question, pattern in TASKS[:n_tasks]:
        answer = ask(model, tokenizer, question, chat)
        results.append(TaskResult(question, answer, re.search(pattern, answer, re.IGNORECASE) is not None))
    return results
