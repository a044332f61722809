"""Round-robin against prefix-aware routing on a multi-turn chat trace (notebook 16).

`compare_routing()` starts two labkit servers (replicas, each with its own prefix cache) and, for each
policy, a router in front of them (labkit.parallel.router), then plays `chat_trace` through it: several
conversations that share a system prompt, turn by turn, every turn resending the whole growing history
(as a chat client does), the turns of all conversations sent together so that they interleave. Each
request is streamed and timed by labkit.loadtest's client (TTFT: request sent -> first text). Per policy
it returns the replicas' prefix-cache hit rate (labkit_prefix_cache_hits_total / _queries_total from
their /metrics, in prompt tokens, summed over replicas), TTFT's median and p95, and the requests each
replica got. Every server and the router are stopped, and their ports freed, before it returns.

Measured with the defaults (5 conversations x 4 turns, 8 new tokens a turn, replicas of 4 seats and one
thread each) on a 2-core Intel Xeon shared with other work (load average 2.6-2.8), 62 s in all:

    >>> print(routing_table(compare_routing()))
    policy       hit rate  cached/prompt tokens TTFT median  TTFT p95  requests per replica
    round-robin     61.2%             1856/3035      1702ms    2536ms  [10, 10]
    prefix          74.9%             2272/3035      1227ms    2179ms  [12, 8]

Round-robin's hits (the shared system prompt, and a history its replica saw two turns before) vary from
run to run with the order in which concurrent turns reach a replica (1968 tokens in another run).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass

import httpx

from labkit.core.arguments import check_int
from labkit.core.doors import check_items
from labkit.loadtest.client import StreamTiming, stream_openai
from labkit.loadtest.metrics_page import metric_value
from labkit.metrics import percentile
from labkit.parallel.router import POLICIES, start_router

SYSTEM = (
    "You are a patient tutor for a course on how language models are served. Answer in one or two short "
    "sentences, plainly, without lists. When a question is vague, answer the most likely reading of it. "
    "The course covers tokenizers, attention, the KV cache, paged attention, continuous batching, "
    "speculative decoding, quantization, and serving a model from several machines."
)
TOPICS = ("the KV cache", "paged attention", "continuous batching", "quantization", "speculative decoding",
          "tensor parallelism", "pipeline parallelism", "a prefix cache")  # fmt: skip
QUESTIONS = (
    "What is {topic}, in one sentence?",
    "Why does {topic} matter when many users send requests at once?",
    "What does {topic} cost in memory or time?",
    "Give one example where {topic} does not help.",
    "How would you measure the effect of {topic}?",
    "Summarise what we said about {topic}.",
)


@dataclass(frozen=True)
class RoutingResult:
    """One policy's run of the trace: the replicas' prefix cache, the clients' TTFT, where requests went."""

    policy: str
    prompt_tokens: int  # prompt tokens the replicas looked up in their prefix caches (summed)
    cached_tokens: int  # ... and found there
    ttft_median_s: float
    ttft_p95_s: float
    per_replica: tuple[int, ...]  # requests each replica got
    errors: int  # requests that did not come back with a 200

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def chat_trace(n_conversations: int = 5, n_turns: int = 4) -> list[list[str]]:
    """The user messages of each conversation, turn by turn: conversation c asks about topic c.

    >>> chat_trace(2, 2)[1]
    ['What is paged attention, in one sentence?', 'Why does paged attention matter when many users ...']
    """
    check_int("n_conversations", n_conversations, minimum=1, maximum=len(TOPICS))
    check_int("n_turns", n_turns, minimum=1, maximum=len(QUESTIONS))
    return [[QUESTIONS[t].format(topic=TOPICS[c]) for t in range(n_turns)] for c in range(n_conversations)]


async def play(
    url: str, model: str, trace: list[list[str]], max_tokens: int, session: int = 0
) -> list[StreamTiming]:
    """Every turn of every conversation, through `url`: turn t of all conversations at once, then t + 1.
    session: a number the system prompt starts with, so that one session shares no block with another."""
    system = f"Session {session}. {SYSTEM}"
    histories = [[{"role": "system", "content": system}] for _ in trace]
    timings = []
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        for turn in range(len(trace[0])):
            for history, questions in zip(histories, trace):
                history.append({"role": "user", "content": questions[turn]})
            sent = [stream_openai(http, model, list(history), max_tokens) for history in histories]
            answers = await asyncio.gather(*sent)
            for history, answer in zip(histories, answers):
                history.append({"role": "assistant", "content": answer.text})
            timings += answers
    return timings


def start_replicas(stack: ExitStack, n: int, model: str, max_num_seqs: int, threads: int) -> list[str]:
    """n labkit servers, each stopped when `stack` closes; their URLs. They start one after the other from
    this thread: a server dies with the thread that started it (labkit.launcher), so not from a pool's."""
    from labkit.serving.http.server import start_server

    env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    handles = [stack.enter_context(start_server(model, max_num_seqs=max_num_seqs, env=env)) for _ in range(n)]
    return [handle.url for handle in handles]


def prefix_counts(urls: Sequence[str]) -> tuple[int, int]:
    """(prompt tokens looked up, found) in the prefix caches of the servers at urls, summed."""
    pages = [httpx.get(url + "/metrics", timeout=30).text for url in urls]
    return tuple(
        int(sum(metric_value(page, f"labkit_prefix_cache_{name}_total") for page in pages))
        for name in ("queries", "hits")
    )


def run_to_end(coroutine):
    """asyncio.run(coroutine), also where an event loop already runs (a notebook's): then in a thread of its
    own, since asyncio.run refuses to start inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def run_policy(
    policy: str, urls: Sequence[str], trace: list[list[str]], model: str, max_tokens: int, session: int
) -> RoutingResult:
    """The trace played through a router of this policy in front of urls (module doc), in a session of its
    own: its prompts share no block with another session's, so the replicas' caches start cold for it."""
    before = prefix_counts(urls)
    with start_router(urls, policy) as router:
        timings = run_to_end(play(router.url, model, trace, max_tokens, session))
        per_replica = tuple(router.per_replica())
    after = prefix_counts(urls)
    ttfts = [timing.ttft_s for timing in timings if timing.status == 200 and timing.error is None]
    if not ttfts:
        raise RuntimeError(f"No request of the trace was answered through the {policy} router: {timings[0]}")
    return RoutingResult(
        policy,
        after[0] - before[0],
        after[1] - before[1],
        percentile(ttfts, 50),
        percentile(ttfts, 95),
        per_replica,
        len(timings) - len(ttfts),
    )


def compare_routing(
    policies: Sequence[str] = POLICIES,
    n_conversations: int = 5,
    n_turns: int = 4,
    max_tokens: int = 8,
    max_num_seqs: int = 4,
    threads: int = 1,
    model: str = "smollm2-135m",
) -> list[RoutingResult]:
    """Two replicas of `model` (max_num_seqs seats, `threads` torch threads each: OMP_NUM_THREADS, so two
        share two cores), and for each policy a router in front of them, and `chat_trace(n_conversations, n_turns)`
        played through it at temperature 0 with max_tokens new tokens a turn (module doc). An odd number of
        conversations keeps round-robin from sending a conversation to the same replica by chance every turn.
    Each policy plays its own session (`play`): the system prompt starts with the session's number, so no
    policy finds blocks another left in the caches.

            >>> [(r.policy, round(r.hit_rate, 2), r.per_replica) for r in compare_routing()]
            [('round-robin', ..., (10, 10)), ('prefix', ..., (...))]
    """
    for policy in check_items("policies", policies, f"policy names from {POLICIES}", of=str):
        if policy not in POLICIES:
            raise ValueError(f"policies must be taken from {POLICIES}, got {policy!r}.")
    trace = chat_trace(n_conversations, n_turns)
    check_int("max_tokens", max_tokens, minimum=1)
    check_int("max_num_seqs", max_num_seqs, minimum=1)
    check_int("threads", threads, minimum=1)
    with ExitStack() as stack:
        urls = start_replicas(stack, 2, model, max_num_seqs, threads)
        return [
            run_policy(policy, urls, trace, model, max_tokens, session)
            for session, policy in enumerate(policies)
        ]


def routing_table(results: Sequence[RoutingResult]) -> str:
    """compare_routing's results, one line per policy (TTFT in milliseconds)."""
    check_items("results", results, "RoutingResult (what compare_routing returns)", of=RoutingResult)
    lines = [
        f"{'policy':12} {'hit rate':>8} {'cached/prompt tokens':>21} {'TTFT median':>11} {'TTFT p95':>9}  "
        "requests per replica"
    ]
    for r in results:
        lines.append(
            f"{r.policy:12} {r.hit_rate:8.1%} {f'{r.cached_tokens}/{r.prompt_tokens}':>21} "
            f"{r.ttft_median_s * 1e3:9.0f}ms {r.ttft_p95_s * 1e3:7.0f}ms  {list(r.per_replica)}"
            + (f"  ({r.errors} errors)" if r.errors else "")
        )
    return "\n".join(lines)
