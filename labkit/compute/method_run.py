"""Run one way of spending compute over many items through the serving engine, and count what it cost.

A *method* (notebook 14) is a prompt per item, decoding options and a reader that takes the answer out of
the text: greedy on the task's prompt; n samples at a temperature; a required calculator call; a thinking
budget. `run_method` hands the engine every item at once, each with `n=` samples prefilled once (the
samples fork from the prompt's blocks, copy on write), and steps it until all are done: the engine keeps
its seats full as items finish (continuous batching, notebook 10). It records every sample's text,
answer, tokens and mean log-probability, and the run's cost: generated tokens and wall seconds.

The choices among samples (labkit.compute.choose) are then scored on the first n samples of each item,
for n = 1, 4, 8, 16 from one run of 16: `frontier` gives accuracy (with its 95 % interval) against the
generated tokens that many samples cost, one point per method and n.

    >>> method = Method("sampled", lambda item: chat_prompt(tokenizer, task_messages(item)),
    ...                 {"temperature": 0.8, "max_new_tokens": 16, "seed": 0})
    >>> run = run_method(Engine(model, tokenizer, max_num_seqs=64), items, method, n=16)
    >>> run.accuracy(self_consistency, n=8), run.tokens_per_item(n=8)     # SmolLM2, 60 sums, temperature 0.8
    (Accuracy(correct=3, total=60), 25.2)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from labkit.compute.accuracy import Accuracy, accuracy
from labkit.compute.choose import CHOOSERS, ORACLE, Chooser, Sample, oracle
from labkit.compute.verifiable import Item, check_item, extract_answer
from labkit.core import doors
from labkit.core.arguments import check_int, check_text
from labkit.core.doors import check_callable, check_record, check_table
from labkit.decoding.request import Prompt
from labkit.decoding.thinking import ThinkingFormat, split_thinking
from labkit.run_log import record, record_result
from labkit.serving.engine import Engine

NS = (1, 4, 8, 16)  # the sample counts a frontier is scored at
THINKING_END = ThinkingFormat().end  # "</think>"


@dataclass(frozen=True)
class Method:
    """How to ask every item: its prompt, the decoding options, and how to read the answer out of a text."""

    name: str
    prompt: Callable[[Item], Prompt]  # item -> prompt (text or token ids)
    options: dict = field(default_factory=dict)  # decoding options for Engine.add_request
    read_answer: Callable[[str], str | None] = extract_answer  # text -> normalized answer, None if none

    def __post_init__(self):
        check_text("name", self.name, example="'self-consistency'")
        check_callable("prompt", self.prompt, "a function of an item that returns its prompt")
        check_table("options", self.options, "decoding options by name")
        check_callable(
            "read_answer", self.read_answer, "a function of a text that returns its answer or None"
        )


@dataclass(frozen=True)
class ItemSamples:
    """One item and its samples, sample 0 first (sample i drew with seed + i)."""

    item: Item
    samples: tuple[Sample, ...]

    def right(self, n: int) -> list[bool]:
        """Whether each of the first n samples gives the item's answer."""
        return [sample.answer == self.item.answer for sample in self.samples[:n]]


@dataclass(frozen=True)
class MethodRun:
    """What one method produced over the items, and what it cost."""

    method: str
    n: int  # samples per item
    items: tuple[ItemSamples, ...]
    prompt_tokens: int  # the items' prompt tokens (each prompt once: its samples share its prefill)
    generated_tokens: int  # every sample's tokens
    wall_s: float  # from the first request added to the last token, on the engine's clock
    peak_blocks: int  # KV blocks in use after the busiest step

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens over the run's wall seconds."""
        return self.generated_tokens / self.wall_s if self.wall_s > 0 else math.nan

    def check_n(self, n: int | None) -> int:
        """n, if it is between 1 and the run's samples per item; the run's n for None."""
        return (
            self.n if n is None else check_int("n", n, minimum=1, maximum=self.n, note="samples in this run")
        )

    def tokens_per_item(self, n: int | None = None) -> float:
        """Mean generated tokens per item over its first n samples (all by default): what n samples cost."""
        n = self.check_n(n)
        return sum(sum(s.n_tokens for s in one.samples[:n]) for one in self.items) / len(self.items)

    def accuracy(self, choose: Chooser, n: int | None = None) -> Accuracy:
        """How often `choose` (labkit.compute.choose) picks the right answer from each item's first n samples."""
        n = self.check_n(n)
        return record_result(accuracy(choose(one.samples[:n]) == one.item.answer for one in self.items))

    def per_sample_accuracy(self) -> float:
        """The share of all samples, over every item, whose answer is right: what one sample is worth on
        average (the first sample alone is one draw of it). Not an Accuracy: the samples of one item are not
        independent, so no interval over samples is printed.

            >>> round(run.per_sample_accuracy(), 3)
            0.068
        """
        right = sum(sample.answer == one.item.answer for one in self.items for sample in one.samples)
        rate = right / sum(len(one.samples) for one in self.items)
        record([rate])  # a measured share: a checker finds it in the run log
        return rate

    def pass_at(self, n: int | None = None) -> Accuracy:
        """pass@n: how often any of each item's first n samples is right (an oracle verifier's choice)."""
        n = self.check_n(n)
        return record_result(
            accuracy(oracle(one.samples[:n], one.item.answer) == one.item.answer for one in self.items)
        )

    def describe(self) -> str:
        """One line: the method, items, samples, tokens and speed."""
        return (
            f"{self.method}: {len(self.items)} items x {self.n} sample(s), {self.prompt_tokens:,} prompt tokens, "
            f"{self.generated_tokens:,} generated ({self.tokens_per_item():.1f} per item) in {self.wall_s:.1f} s, "
            f"{self.tokens_per_s:.0f} tokens/s, at most {self.peak_blocks} KV blocks"
        )


def answer_after_thinking(text: str) -> str | None:
    """The answer of a text that began inside a thinking section (thinking_prompt opened it): the last
    number after the end marker, or, when the model never closed the section, the last number it wrote.

        >>> answer_after_thinking("12 + 7 is 19</think> The answer is 19."), answer_after_thinking("It is 7")
        ('19', '7')
    """
    thinking, answer = split_thinking(text, opened=True)
    return extract_answer(answer if THINKING_END in text else thinking)


def check_items(items: object) -> list[Item]:
    """items as a list of Items (from verifiable.load_task); a TypeError or ValueError otherwise."""
    if not isinstance(items, Sequence) or isinstance(items, (str, Item)) or not items:
        raise ValueError(
            f"items must be a non-empty list of Items (verifiable.load_task), got {items!r:.60}."
        )
    for item in items:
        check_item(item)
    return list(items)


def run_method(
    engine: Engine,
    items: Sequence[Item],
    method: Method,
    n: int = 1,
    progress: Callable[[int], object] | None = None,
) -> MethodRun:
    """Ask the engine for n samples of every item at once (each item prefilled once) and collect them.

    engine: a fresh Engine (a used one keeps earlier prompts' blocks in its prefix cache) with at least n
    seats. progress: called with the number of samples that finished at each step (tqdm's `update`).

        >>> run = run_method(Engine(model, tokenizer, max_num_seqs=32), items[:4], method, n=8)
        >>> run.items[0].samples[0]            # its text, the answer read from it, tokens, mean log-probability
        Sample(text=..., answer=..., n_tokens=..., mean_logprob=...)
    """
    if not isinstance(engine, Engine):
        raise TypeError(f"engine must be a labkit serving Engine, got {type(engine).__name__}.")
    if not isinstance(method, Method):
        raise TypeError(
            f"method must be a Method(name, prompt, options, read_answer), got {type(method).__name__}."
        )
    items = check_items(items)
    check_int(
        "n", n, minimum=1, maximum=engine.config.max_num_seqs, note="samples per item, at most the seats"
    )
    start, first_step = engine.clock(), len(engine.step_metrics)
    heads = [engine.add_request(method.prompt(item), n=n, logprobs=0, **method.options) for item in items]
    texts: dict[int, str] = {sample: "" for head in heads for sample in engine.samples(head)}
    while engine.has_unfinished():
        outputs = engine.step()
        for out in outputs:
            texts[out.request_id] += out.text
        if progress is not None:
            progress(sum(out.finish_reason is not None for out in outputs))
    wall_s = engine.clock() - start
    collected = tuple(
        ItemSamples(
            item,
            tuple(
                collect(engine, sample, texts[sample], method.read_answer) for sample in engine.samples(head)
            ),
        )
        for item, head in zip(items, heads)
    )
    steps = list(engine.step_metrics)[first_step:]
    return MethodRun(
        method.name,
        n,
        collected,
        sum(len(engine.requests[head].prompt_ids) for head in heads),
        sum(s.n_tokens for one in collected for s in one.samples),
        wall_s,
        max((step.blocks_used for step in steps), default=0),
    )


def collect(engine: Engine, request_id: int, text: str, read_answer: Callable[[str], str | None]) -> Sample:
    """The Sample of one finished request: its text, answer, tokens and mean raw log-probability."""
    logprobs = [token.logprob for token in engine.logprobs(request_id)]
    mean = sum(logprobs) / len(logprobs) if logprobs else math.nan
    return Sample(text, read_answer(text), len(engine.requests[request_id].output_ids), mean)


@dataclass(frozen=True)
class FrontierPoint:
    """One method at one n: what it cost per item and how often it was right."""

    method: str
    n: int
    tokens_per_item: float
    accuracy: Accuracy
    note: str = ""  # what the plot writes beside the point instead of n (a thinking budget: "budget 16")


def frontier(
    run: MethodRun,
    ns: Sequence[int] = NS,
    choosers: dict[str, Chooser] | None = None,
    with_oracle: bool = True,
    method: str | None = None,
    note: str = "",
) -> list[FrontierPoint]:
    """Every chooser (CHOOSERS by default) and the oracle (pass@n) scored on the first n samples of `run`,
    for each n in `ns` that the run has; a run of 1 sample gives one point, named `method` (the run's own
    name by default) with `note` beside it.

        >>> [(p.method, p.n, round(p.tokens_per_item, 1), p.accuracy.correct) for p in frontier(run)][:2]
        [('self-consistency', 1, 3.2, 4), ('self-consistency', 4, 12.8, 4)]
    """
    check_record("run", run, "a MethodRun (from run_method)", of=MethodRun)
    if run.n == 1:
        return [
            FrontierPoint(method or run.method, 1, run.tokens_per_item(1), run.accuracy(first_answer), note)
        ]
    points = []
    for name, choose in (CHOOSERS if choosers is None else choosers).items():
        points += [
            FrontierPoint(name, n, run.tokens_per_item(n), run.accuracy(choose, n)) for n in ns if n <= run.n
        ]
    if with_oracle:
        points += [FrontierPoint(ORACLE, n, run.tokens_per_item(n), run.pass_at(n)) for n in ns if n <= run.n]
    return points


def first_answer(samples: Sequence[Sample]) -> str | None:
    """The first sample's answer: the choice of a method that draws one."""
    doors.check_items("samples", samples, "Sample (labkit.compute.choose)", has=("answer",))
    return samples[0].answer


def frontier_table(points: Sequence[FrontierPoint]) -> str:
    """The points as a table: method, n, tokens per item, accuracy [95 % interval] (right of total)."""
    doors.check_items("points", points, "FrontierPoint (from frontier)", of=FrontierPoint)
    lines = [f"{'method':<24}{'n':>3}{'tokens/item':>12}  accuracy [95 % interval]"]
    lines += [
        f"{p.method:<24}{p.n:>3}{p.tokens_per_item:>12.1f}  {p.accuracy}{'  ' + p.note if p.note else ''}"
        for p in points
    ]
    return "\n".join(lines)
