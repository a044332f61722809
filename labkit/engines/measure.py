"""Fill one row of notebook 12's side-by-side table by running the same requests through a runner.

Every engine gets the same chats, greedy, with the same token budgets: TTFT on one streamed chat (median
of `repeats`), batch-1 tokens/s on a long answer (median; prefill included), 8 requests at once, the first
32 greedy tokens of three answers, and the top-5 first answer tokens of the chat prompt.

Timed requests start with a system message of their own ("Request 3."): llama.cpp, vLLM and labkit's
server all reuse the KV cache of a prompt prefix they have seen (prefix caching, notebook 10), so a
repeated prompt would skip its prefill and time only part of the work.

    >>> row = measure(TransformersRunner(model, tokenizer), startup_s=2.1, policy="PASSIVE")
    >>> print(side_by_side([row, ...]))

timed_load (an engine's load seconds and the memory it adds) and decode_rate (section 8.2's decode-only
rate) time the same way in the notebook's process and in a process of its own (labkit.benchmarks.engines_child).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from labkit.core.arguments import check_int
from labkit.core.doors import check_callable, check_items, check_number, check_record
from labkit.core.text import chat_prompt
from labkit.decoding.generate import generate, generate_ids
from labkit.engines.compare import GREEDY_TOKENS, TOP_K, EngineRow
from labkit.loadtest.load import question
from labkit.metrics import current_memory_bytes
from labkit.run_log import record
from labkit.timing import time_once

T = TypeVar("T")

# Prompts whose greedy answers are not decided by a near-tie at the first token (notebook 12 checks the
# margins), so that agreement measures the engines rather than luck.
AGREEMENT_CHATS = [
    [{"role": "user", "content": "List three primary colors."}],
    [{"role": "user", "content": "Explain what a CPU does in two sentences."}],
    [{"role": "user", "content": "Write a haiku about the sea."}],
]
# "The" 0.152 vs "L" 0.140 in float32: the next-token distribution is the fair comparison here.
TOP_CHAT = [{"role": "user", "content": "What is the capital of France?"}]
SPEED_CHAT = [{"role": "user", "content": "Write a short story about a robot who learns to paint."}]
SPEED_TOKENS = 64
CONCURRENT_REQUESTS = 8
CONCURRENT_TOKENS = 32
# measure(quick=True), CI's run of notebook 12, which checks that every engine fills its row, not its speed:
# a 16-token answer, 4 requests of 8 tokens at once, and greedy agreement on the first chat only.
QUICK_SPEED_TOKENS, QUICK_CONCURRENT, QUICK_CHATS = 16, (4, 8), 1


def check_runner(runner: object) -> object:
    """runner, if it answers chats as labkit.engines.runners' runners do; else a TypeError naming it."""
    return check_record(
        "runner",
        runner,
        "an engine runner (labkit.engines.runners, ServerRunner)",
        has=("name", "tokenizer", "answer", "ttft", "concurrent_rate", "top_tokens"),
    )


def median_of(run: Callable[[int], float], repeats: int) -> float:
    """The median of run(0), run(1), ... run(repeats - 1)."""
    check_callable("run", run, "a function of the repeat's number (0, 1, ...) that returns a number")
    check_int("repeats", repeats, minimum=1)
    median = statistics.median(run(i) for i in range(repeats))
    record([median])  # a measured rate: a checker finds it in the run log
    return median


def fresh(chat: list[dict], number: int) -> list[dict]:
    """`chat` behind a system message no earlier request had, so no engine finds its prompt cached.

    >>> fresh([{"role": "user", "content": "Hi"}], 3)[0]
    {'role': 'system', 'content': 'Request 3.'}
    """
    return [{"role": "system", "content": f"Request {number}."}, *chat]


def answer_rate(runner, max_tokens: int = SPEED_TOKENS, number: int = 0) -> float:
    """Output tokens per second of one greedy answer, its prefill included."""
    check_runner(runner)
    check_int("max_tokens", max_tokens, minimum=1)
    answer = runner.answer(fresh(SPEED_CHAT, number), max_tokens)
    return answer.tokens / answer.seconds


def greedy_tokens(runner, chats: Sequence[list[dict]], n: int = GREEDY_TOKENS) -> list[list[int]]:
    """The first n tokens of each greedy answer, as the tokenizer reads the answer text (the same for all)."""
    tokenize = runner.tokenizer
    return [
        tokenize(runner.answer(chat, n).text, add_special_tokens=False)["input_ids"][:n] for chat in chats
    ]


def one_token(loaded: tuple) -> None:
    """Answer one request of one token with a (model, tokenizer) pair: timed_load's warm-up for labkit and
    transformers, so that the weights they read lazily are in memory."""
    if not isinstance(loaded, (tuple, list)) or len(loaded) != 2:
        raise TypeError(
            f"loaded must be a (model, tokenizer) pair, as load_model returns it, "
            f"got {type(loaded).__name__}."
        )
    model, tokenizer = loaded
    generate_ids(model, tokenizer, chat_prompt(tokenizer, "Hi"), max_new_tokens=1)


def timed_load(load: Callable[[], T], warm_up: Callable[[T], object]) -> tuple[T, float, int | None]:
    """(what load() returned, its seconds, the resident memory it added once warm_up(it) has answered one
    request: engines read their weights lazily). An engine loaded in a process of its own is timed the same way.

        >>> llm, seconds, rss = timed_load(lambda: load_llamacpp(n_threads=2), lambda llm: llm("Hi", max_tokens=1))
    """
    check_callable("load", load, "a function of no arguments that loads the engine and returns it")
    check_callable("warm_up", warm_up, "a function of what load returned that answers one request")
    before = current_memory_bytes()
    loaded, seconds = time_once(load)
    warm_up(loaded)
    after = current_memory_bytes()
    return loaded, seconds, None if before is None or after is None else after - before


def decode_rate(model, tokenizer, prompt: str, new_tokens: int = 64) -> float:
    """Tokens/s of decoding alone: greedy, timed from the first new token (the prefill is over) to the last."""
    produced, first_at = 0, time.perf_counter()
    for produced, _ in enumerate(
        generate(model, tokenizer, prompt, max_new_tokens=new_tokens + 1, temperature=0)
    ):
        if produced == 0:
            first_at = time.perf_counter()
    return produced / (time.perf_counter() - first_at)


def measure(
    runner,
    startup_s: float,
    rss_bytes: int | None = None,
    repeats: int = 3,
    chats: Sequence[list[dict]] = AGREEMENT_CHATS,
    notes: str = "",
    policy: str = "",
    quick: bool = False,
) -> EngineRow:
    """One EngineRow for `runner` (see the module doc); rss_bytes defaults to the runner's own, if it has one.
    policy: the OpenMP wait policy the engine's process runs under, as the table states it. quick: fewer
    tokens everywhere (QUICK_SPEED_TOKENS, QUICK_CONCURRENT, the first QUICK_CHATS chats), for a run that
    checks that every engine answers rather than how fast."""
    check_runner(runner)
    check_number("startup_s", startup_s, minimum=0)
    check_int("repeats", repeats, minimum=1)
    check_items("chats", chats, "chats (lists of {'role', 'content'} messages)", of=list)
    if not isinstance(quick, bool):
        raise TypeError(f"quick must be True or False, got {quick!r}.")
    speed_tokens, (requests, tokens) = (
        (QUICK_SPEED_TOKENS, QUICK_CONCURRENT)
        if quick
        else (SPEED_TOKENS, (CONCURRENT_REQUESTS, CONCURRENT_TOKENS))
    )
    chats = chats[:QUICK_CHATS] if quick else chats
    runner.answer(TOP_CHAT, 4)  # warm-up: first calls allocate and load lazily
    ttft = median_of(lambda i: runner.ttft(fresh(TOP_CHAT, i)), repeats)
    rate = median_of(lambda i: answer_rate(runner, speed_tokens, number=repeats + i), repeats)
    concurrent = runner.concurrent_rate([question(i) for i in range(requests)], tokens)
    if rss_bytes is None and hasattr(runner, "rss_bytes"):
        rss_bytes = runner.rss_bytes()
    return EngineRow(
        runner.name,
        startup_s,
        ttft,
        rate,
        concurrent,
        rss_bytes,
        greedy_tokens(runner, chats),
        runner.top_tokens(TOP_CHAT, TOP_K),
        notes,
        policy,
    )
