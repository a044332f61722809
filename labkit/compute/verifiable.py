"""A task whose answers a program can check, for spending compute at inference time (notebook 14).

A task is *verifiable* when a few lines of code tell a right answer from a wrong one. Then extra compute
at inference time can be measured instead of argued about: draw n answers to each question and count
how often the right one is among them (pass@n, Chen et al. 2021), or let the answers vote and keep the
most common one (self-consistency, Wang et al. 2023). Both need the same three pieces, which live here:
the items (`load_task`), the stated prompt (`task_prompt`, or `task_messages` for a chat model) and the
checker (`extract_answer` reads the answer out of free text, `is_correct` compares it).

The bundled task `sums` (data/inference_compute/sums.jsonl, written for this project) holds 120 sums of
a two-digit and a one-digit number, such as "47 + 8" -> "55". They are easy for people and hard for
these models. Measured once in float32 on the CPU (greedy, at most 24 new tokens, stop=STOP):
Gemma-3-270M (base) with the few-shot `task_prompt` is right on 52 of 120 items (43 %); on the first 30,
greedy is right on 14, the right answer is among 16 samples at temperature 0.8 (seeds 0-15) on 26, and the
16 samples' vote is right on 13: its wrong answers cluster ("24 + 3" -> "21", 14 times in 16), so voting
amplifies the model's habit, right or wrong. SmolLM2-135M-Instruct with `task_messages` is right on 11 (9 %).

    >>> items = load_task("sums")
    >>> items[0]
    Item(question='24 + 5', answer='29')
    >>> text = labkit.generate_text(model, tokenizer, task_prompt(items[0]), max_new_tokens=24,
    ...                             temperature=0, stop=STOP)   # Gemma-3-270M: ' 23'
    >>> is_correct(items[0], text)
    False
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from labkit.core.arguments import check_choice

TASK_DIR = Path(__file__).resolve().parents[2] / "data" / "inference_compute"

# The stated prompt: worked examples (none of them in the data) before the question, one sum a line.
SHOTS = (("6 + 3", "9"), ("23 + 14", "37"), ("48 + 7", "55"), ("71 + 5", "76"))
# The same sums worked digit by digit, for a prompt that leaves the model room to reason (`steps_prompt`).
STEPS = (
    "6 + 3 = 9.",
    "3 + 4 = 7, and 2 + 1 = 3.",
    "8 + 7 = 15, so write 5 and carry 1. 4 + 1 = 5.",
    "1 + 5 = 6, and 7 stays.",
)
STOP = ("\n",)  # a base model goes on to write the next sum: the answer ends at the line break
CHAT_SYSTEM = "Reply with the answer number only."

# A number: an optional sign (not a minus between two numbers, as in "10-3"), digits with or without
# thousands commas ("1,200"), an optional decimal part. A full stop after it ends the sentence.
NUMBER = re.compile(r"(?<![\w.])(?:[-+](?=\d))?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?")


@dataclass(frozen=True)
class Item:
    """One question and its exact answer, written as `extract_answer` would read it ("55", "-3", "2.5")."""

    question: str
    answer: str


def task_names(folder: Path = TASK_DIR) -> list[str]:
    """The tasks in `folder`: the names of its .jsonl files, sorted.

    >>> task_names()
    ['sums', 'two_steps']
    """
    return sorted(path.stem for path in Path(folder).glob("*.jsonl"))


def load_task(name: str = "sums", folder: Path = TASK_DIR) -> list[Item]:
    """The items of task `name`, in file order: one JSON object a line, {"question": ..., "answer": ...}.

    Every line is checked: both fields are non-empty strings, the answer is already in the form
    `extract_answer` gives, and no question appears twice.

        >>> len(load_task("sums"))
        120
    """
    if not Path(folder).is_dir():
        raise FileNotFoundError(
            f"{folder} is missing. The tasks live in the repository's data/inference_compute/ "
            "folder: install labkit from a checkout with `pip install -e .` (as `make lab` does)."
        )
    path = Path(folder) / f"{check_choice('name', name, tuple(task_names(folder)))}.jsonl"
    items, seen = [], set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            item = parse_item(line, f"{path.name}, line {number}")
            if item.question in seen:
                raise ValueError(f"{path.name}, line {number}: the question {item.question!r} appears twice.")
            seen.add(item.question)
            items.append(item)
    return items


def parse_item(line: str, where: str) -> Item:
    """One JSON line as an Item; a ValueError saying `where` and what is wrong otherwise.

    >>> parse_item('{"question": "2 + 2", "answer": "4"}', "line 1")
    Item(question='2 + 2', answer='4')
    """
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where}: not a JSON object ({error.msg}).") from None
    if not isinstance(record, dict) or set(record) != {"question", "answer"}:
        raise ValueError(
            f"{where}: an item is a JSON object with exactly the keys 'question' and 'answer', "
            f"got {line.strip()[:80]!r}."
        )
    question, answer = record["question"], record["answer"]
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: the question must be a non-empty string, got {question!r}.")
    if not isinstance(answer, str) or extract_answer(answer) != answer:
        raise ValueError(
            f"{where}: the answer must be a number written as extract_answer reads it "
            f"(e.g. '55', '-3', '2.5'), got {answer!r}."
        )
    return Item(question, answer)


def task_prompt(item: Item) -> str:
    """The stated few-shot prompt for a base model (Gemma-3-270M): worked sums, then the question.

    Generate with `stop=STOP` so the answer ends where the model starts the next sum.

        >>> print(task_prompt(Item("47 + 8", "55")))
        6 + 3 = 9
        23 + 14 = 37
        48 + 7 = 55
        71 + 5 = 76
        47 + 8 =
    """
    check_item(item)
    return "".join(f"{question} = {answer}\n" for question, answer in SHOTS) + f"{item.question} ="


def steps_prompt(item: Item) -> str:
    """The same worked sums as `task_prompt`, each with its digit-by-digit steps before the answer, for a base
    model: room to reason on one line. Generate with `stop=STOP`; `extract_answer` reads the line's last number.

    Measured once on Gemma-3-270M base, the first 60 sums, float32, through the serving engine (a 2-core Intel
    Xeon with AVX-512, under load): greedy is right on 13 of 60 (22 %), against 25 (42 %) with `task_prompt`;
    its steps copy the examples' shape, not their arithmetic ("77 + 3 = 78, and 77 stays. The answer is 78.").
    Sampled at temperature 0.8 (16 samples, at most 48 tokens; 790 s), 4 % of the samples are right, their vote 5 %,
    and the right answer is among the 16 on 38 % of the sums: the steps add ways to go wrong, not to agree.

        >>> print(steps_prompt(Item("47 + 8", "55")).splitlines()[-3:])
        ['A: 1 + 5 = 6, and 7 stays. The answer is 76.', 'Q: 47 + 8', 'A:']
    """
    check_item(item)
    shots = "".join(
        f"Q: {question}\nA: {steps} The answer is {answer}.\n"
        for (question, answer), steps in zip(SHOTS, STEPS)
    )
    return shots + f"Q: {item.question}\nA:"


def task_messages(item: Item) -> list[dict[str, str]]:
    """The same worked examples as a chat, for an instruction-tuned model (pass it to `chat_prompt`).

    >>> task_messages(Item("47 + 8", "55"))[-1]
    {'role': 'user', 'content': 'What is 47 + 8?'}
    """
    check_item(item)
    messages = [{"role": "system", "content": CHAT_SYSTEM}]
    for question, answer in SHOTS:
        messages += [
            {"role": "user", "content": f"What is {question}?"},
            {"role": "assistant", "content": answer},
        ]
    return messages + [{"role": "user", "content": f"What is {item.question}?"}]


def extract_answer(text: str) -> str | None:
    """The last number in `text`, normalized; None when there is none.

    Normalized: thousands commas and a leading "+" dropped, trailing decimal zeros dropped ("42.0" -> "42"),
    so that equal numbers compare equal as strings. A model that keeps talking after its answer may be
    misread: the last number is the convention of GSM8K-style checkers, and `STOP` ends the answer early.

        >>> extract_answer("The answer is 1,200.")
        '1200'
        >>> extract_answer("47 + 8 = 55") , extract_answer("no idea")
        ('55', None)
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string (the generated text), got {type(text).__name__}.")
    numbers = NUMBER.findall(text)
    if not numbers:
        return None
    value = Decimal(numbers[-1].replace(",", "").lstrip("+"))
    return "0" if value == 0 else format(value.normalize(), "f")


def is_correct(item: Item, text: str) -> bool:
    """Whether the answer read from `text` is the item's answer.

    >>> is_correct(Item("47 + 8", "55"), " 55")
    True
    """
    check_item(item)
    return extract_answer(text) == item.answer


def majority_answer(texts: Sequence[str]) -> str | None:
    """The answer most of `texts` give (self-consistency's vote); texts without a number do not vote.

    A tie goes to the answer that came first. None when no text holds a number.

        >>> majority_answer(["54", "55", "It is 55.", "no idea"])
        '55'
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"texts must be a list of generated texts, got {type(texts).__name__}.")
    votes = Counter(answer for answer in map(extract_answer, texts) if answer is not None)
    return max(votes, key=votes.__getitem__) if votes else None  # max keeps the first of equal counts


def check_item(item: object) -> None:
    """A TypeError unless `item` is an Item (from `load_task`)."""
    if not isinstance(item, Item):
        raise TypeError(f"item must be an Item from load_task(), got {type(item).__name__}.")
