"""The workload of notebook 10 and `python -m labkit.bench batching`, and three ways to serve it.

A workload is a list of chat requests of varied prompt length and `max_new_tokens`, arriving together
or staggered (Poisson arrivals). The same workload is served three ways, on the real clock:

- **one at a time**: `labkit.generate` per request, in arrival order (a request waits for the ones before it);
- **static batches**: a real padded batch (`labkit.serving.static_batch`): the next `batch_size` requests
  start together once all of them have arrived and the previous batch is done, prompts padded to the
  longest, every row decoding until the batch's longest answer ends (the wasted slots are counted);
- **continuous batching**: the `Engine`, each request added the moment it arrives, each leaving when done
  (optionally with chunked prefill).

TTFT is measured from each request's arrival, so waiting in a queue counts, as a user would feel it.
Each run returns a `RunResult`, and `results_table` compares them (both in `labkit.serving.run_result`).

    >>> workload = make_workload(tokenizer, n_requests=16)
    >>> results = [run_one_at_a_time(model, tokenizer, workload), run_continuous(model, tokenizer, workload)]
    >>> print(results_table(results))
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.doors import check_items, check_model, check_record
from labkit.core.text import chat_prompt
from labkit.decoding.config import DecodingConfig
from labkit.decoding.generate import generate
from labkit.metrics import time_per_output_token
from labkit.serving.engine import Engine
from labkit.serving.run_result import RunResult
from labkit.serving.static_batch import StaticBatch, Waste

BLOCK_SIZE = 16  # tokens per KV block of the engines these runners make

QUESTIONS = (
    "What is the capital of France?",
    "Name three primary colors.",
    "Why is the sky blue?",
    "Give me a synonym for happy.",
    "How many legs does a spider have?",
    "What is photosynthesis?",
    "Write a haiku about the autumn moon over a quiet lake.",
    "Explain in simple words what a neural network is.",
    "What are the main differences between a cat and a dog as pets?",
    "Suggest a name for a small bakery that sells bread and cakes in a seaside town.",
    "List some healthy snacks that are easy to take to work or school.",
    "My tomato plants have yellow leaves at the bottom and the soil is always wet. What should I do?",
    "I am planning a three-day trip to Rome in October with my parents, who do not like long walks. "
    "Which sights should we see, and how should we split them across the days?",
    "Summarize in one sentence: The old lighthouse stood at the edge of the cliff for two hundred years. "
    "Every night its keeper climbed the stairs and watched the beam sweep across the dark water.",
    "Write a short, friendly email to a colleague asking to move our Tuesday meeting to Thursday "
    "afternoon, because I have a doctor's appointment on Tuesday.",
    "Here is a list of chores: wash the dishes, take out the trash, vacuum the living room, water the "
    "plants, fold the laundry, clean the bathroom. Split them fairly between two people and explain why.",
)


@dataclass(frozen=True)
class WorkItem:
    """One request of a workload."""

    prompt_ids: list[int]  # a chat prompt (the tokenizer's chat template), of varied length
    max_new_tokens: int  # at most this many new tokens (greedy chat answers may end earlier, at EOS)
    arrival_s: float  # seconds after the run starts when it arrives (0 for all when arriving together)


def make_workload(
    tokenizer: PreTrainedTokenizerBase,
    n_requests: int = 16,
    staggered: bool = False,
    seed: int = 0,
    max_new_tokens: tuple[int, int] = (16, 64),
    mean_gap_s: float = 0.1,
) -> list[WorkItem]:
    """n_requests chat requests: varied questions and max_new_tokens in [low, high]; a seed reproduces it.

    staggered: Poisson arrivals, gaps drawn from an exponential of mean `mean_gap_s` (the first at 0).

        >>> [item.arrival_s for item in make_workload(tokenizer, 3, staggered=True)]
        [0.0, 0.141..., 0.302...]
    """
    low, high = max_new_tokens
    check_int("n_requests", n_requests, minimum=1)
    if not 1 <= low <= high or mean_gap_s <= 0:
        raise ValueError(
            f"Need 1 <= low <= high in max_new_tokens={max_new_tokens!r} and mean_gap_s > 0 "
            f"(got {mean_gap_s!r})."
        )
    rng = random.Random(seed)
    rounds = math.ceil(n_requests / len(QUESTIONS))  # each question once per round, in a shuffled order
    questions = [q for _ in range(rounds) for q in rng.sample(QUESTIONS, len(QUESTIONS))]
    items, arrival = [], 0.0
    for index in range(n_requests):
        if staggered and index > 0:
            arrival += rng.expovariate(1 / mean_gap_s)
        items.append(WorkItem(chat_prompt(tokenizer, questions[index]), rng.randint(low, high), arrival))
    return items


def check_run(model: object, tokenizer: object, workload: object) -> None:
    """Refuse, by name, what the run_* functions cannot serve: not a model, a tokenizer or WorkItems."""
    check_model("model", model)
    check_record("tokenizer", tokenizer, "a tokenizer (as load_model returns it)", of=PreTrainedTokenizerBase)
    check_items("workload", workload, "WorkItem (from make_workload)", of=WorkItem)


class Timeline:
    """The tokens of each request and when they came, since the run started (time.perf_counter)."""

    def __init__(self, name: str, workload: list[WorkItem]):
        self.name, self.workload = name, workload
        self.tokens: list[list[int]] = [[] for _ in workload]
        # token times, per request
        self.first, self.last = [math.nan] * len(workload), [math.nan] * len(workload)
        self.start = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.start  # seconds since the run started

    def wait_until(self, moment: float) -> None:
        """Sleep until `moment` seconds after the start (nothing to do meanwhile)."""
        delay = moment - self.now()
        if delay > 0:
            time.sleep(delay)

    def record(self, index: int, token_id: int) -> None:
        moment = self.now()
        if not self.tokens[index]:
            self.first[index] = moment
        self.last[index] = moment
        self.tokens[index].append(token_id)

    def result(self, waste: Waste | None = None) -> RunResult:
        wall = max(self.last)
        arrivals = [item.arrival_s for item in self.workload]
        tpot = tuple(
            time_per_output_token(first, last, len(ids))
            for first, last, ids in zip(self.first, self.last, self.tokens)
            if len(ids) > 1
        )
        return RunResult(
            self.name,
            wall,
            sum(len(ids) for ids in self.tokens),
            tuple(first - arrival for first, arrival in zip(self.first, arrivals)),
            tpot,
            tuple(tuple(ids) for ids in self.tokens),
            waste,
        )


def arrival_order(workload: list[WorkItem]) -> list[int]:
    """Indices of the workload, by arrival (ties in workload order)."""
    return sorted(range(len(workload)), key=lambda i: workload[i].arrival_s)


def item_config(config: DecodingConfig | None, item: WorkItem) -> DecodingConfig:
    """The run's decoding options (default greedy) with this request's max_new_tokens."""
    return (config or DecodingConfig()).replace(max_new_tokens=item.max_new_tokens)


def run_one_at_a_time(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    workload: list[WorkItem],
    config: DecodingConfig | None = None,
) -> RunResult:
    """`labkit.generate` per request, in arrival order, each waiting for the one before (batch 1).

    >>> run_one_at_a_time(model, tokenizer, make_workload(tokenizer, 4)).tokens_per_s
    """
    check_run(model, tokenizer, workload)
    line = Timeline("one at a time", workload)
    for index in arrival_order(workload):
        line.wait_until(workload[index].arrival_s)
        for step in generate(
            model, tokenizer, workload[index].prompt_ids, item_config(config, workload[index])
        ):
            line.record(index, step.token_id)
    return line.result()


def make_engine(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    workload: list[WorkItem],
    max_num_seqs: int,
    chunked_prefill: bool = False,
    max_num_batched_tokens: int | None = None,
) -> Engine:
    """An Engine whose pool holds every request of the workload at its longest: nothing is ever preempted.

    chunked_prefill: passed on with `max_num_batched_tokens` (the per-step token budget).

        >>> make_engine(model, tokenizer, workload, 16, chunked_prefill=True, max_num_batched_tokens=64)
    """
    blocks = sum(math.ceil((len(item.prompt_ids) + item.max_new_tokens) / BLOCK_SIZE) for item in workload)
    return Engine(
        model,
        tokenizer,
        max_num_seqs=max_num_seqs,
        n_blocks=blocks,
        block_size=BLOCK_SIZE,
        max_num_batched_tokens=max_num_batched_tokens,
        chunked_prefill=chunked_prefill,
    )


def serve(engine: Engine, line: Timeline, config: DecodingConfig | None) -> None:
    """Feed the workload to the engine as requests arrive (continuous batching), step it, record every token.

    >>> serve(make_engine(model, tokenizer, workload, 16), Timeline("continuous", workload), None)
    """
    workload, pending, index_of = line.workload, deque(arrival_order(line.workload)), {}
    while pending or engine.has_unfinished():
        while pending and workload[pending[0]].arrival_s <= line.now():
            index = pending.popleft()
            index_of[engine.add_request(workload[index].prompt_ids, item_config(config, workload[index]))] = (
                index
            )
        if engine.has_unfinished():
            for out in engine.step():
                line.record(index_of[out.request_id], out.token_id)
        elif pending:
            line.wait_until(workload[pending[0]].arrival_s)


def run_static_batches(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    workload: list[WorkItem],
    batch_size: int = 4,
    config: DecodingConfig | None = None,
) -> RunResult:
    """Real static batches (`StaticBatch`): the next batch_size requests, in arrival order, start together once
    all of them arrived and the previous batch ended; padded, each runs until its longest answer is done.

        >>> run_static_batches(model, tokenizer, make_workload(tokenizer, 8), batch_size=4).waste.share
    """
    check_run(model, tokenizer, workload)
    line, order, waste = (
        Timeline(f"static, {batch_size} seats, padded", workload),
        arrival_order(workload),
        Waste(),
    )
    for first in range(0, len(order), batch_size):
        chosen = order[first : first + batch_size]
        line.wait_until(workload[chosen[-1]].arrival_s)
        batch = StaticBatch(
            model,
            tokenizer,
            [workload[i].prompt_ids for i in chosen],
            [item_config(config, workload[i]) for i in chosen],
            BLOCK_SIZE,
        )
        while not batch.done:
            for row, token_id in batch.step():
                line.record(chosen[row], token_id)
        waste += batch.waste
    return line.result(waste)


def run_continuous(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    workload: list[WorkItem],
    max_num_seqs: int = 16,
    config: DecodingConfig | None = None,
    *,
    chunked_prefill: bool = False,
    max_num_batched_tokens: int | None = None,
) -> RunResult:
    """The Engine with continuous batching: each request joins the running batch when it arrives.

    chunked_prefill, max_num_batched_tokens: the Engine's options (a prompt chunk per step, under a token budget).

        >>> run_continuous(model, tokenizer, make_workload(tokenizer, 16, staggered=True)).tokens_per_s
    """
    check_run(model, tokenizer, workload)
    chunked = f", chunked {max_num_batched_tokens or 'default'}/step" if chunked_prefill else ""
    line = Timeline(f"continuous, {max_num_seqs} seats{chunked}", workload)
    serve(
        make_engine(model, tokenizer, workload, max_num_seqs, chunked_prefill, max_num_batched_tokens),
        line,
        config,
    )
    return line.result()
