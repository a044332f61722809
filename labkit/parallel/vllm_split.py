"""vLLM's own tensor parallelism on this machine, beside its single rank (notebook 16).

`compare_vllm_split()` starts vLLM's CPU server twice on Gemma-3-270M (4 attention heads, so 2 ranks
split them evenly; SmolLM2's 9 do not split in two): once as one rank whose OpenMP threads cover every
core, once as 2 ranks of one core each (`--tensor-parallel-size 2`), the same split as labkit's
`tp_session` against one process of 2 threads. Through the same `openai` client each answers the same
prompts greedily, then decodes one request of `new_tokens` tokens `repeats` times (the end-of-text
token ignored, so every run decodes the same count). Per setup it returns the seconds to start (launch
to /v1/models answering), the answers and the median tokens/s of one request, prefill included. Each
server is stopped before the next starts, so the two never share the cores.

    >>> runs = compare_vllm_split()                      # two starts of about a minute each on 2 cores
    >>> print(vllm_split_table(runs))
    >>> runs[0].answers == runs[1].answers               # greedy: the split gives one rank's text
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import openai

from labkit.core.arguments import check_int
from labkit.core.doors import check_items
from labkit.engines.install import MAKE_ENGINES, vllm_installed
from labkit.engines.vllm import start_vllm_server

MODEL = "gemma3-270m"
PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):",
    "A KV cache stores",
)
SETUPS = {"1 rank x 2 cores": {"all_cores": True}, "2 ranks x 1 core": {"tensor_parallel_size": 2}}


@dataclass(frozen=True)
class SplitRun:
    setup: str  # a key of SETUPS
    startup_s: float  # launch -> /v1/models answers
    answers: tuple[str, ...]  # one greedy completion a prompt
    tokens_per_s: float  # one request's new tokens over its whole time, median of the repeats


def greedy_answers(client: openai.OpenAI, prompts: Sequence[str], max_tokens: int) -> tuple[str, ...]:
    """Each prompt's greedy completion of up to max_tokens tokens (temperature 0)."""
    return tuple(
        client.completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0)
        .choices[0]
        .text
        for prompt in prompts
    )


def one_request_rate(client: openai.OpenAI, new_tokens: int, repeats: int) -> float:
    """Median tokens/s of one request decoding exactly new_tokens tokens (end of text ignored)."""
    rates = []
    for _ in range(repeats):
        began = time.perf_counter()
        reply = client.completions.create(
            model=MODEL,
            prompt=PROMPTS[0],
            max_tokens=new_tokens,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
        rates.append(reply.usage.completion_tokens / (time.perf_counter() - began))
    return statistics.median(rates)


def run_setup(
    setup: str, prompts: Sequence[str], answer_tokens: int, new_tokens: int, repeats: int
) -> SplitRun:
    """Start vLLM as `setup`, measure it, and stop it."""
    began = time.perf_counter()
    with start_vllm_server(MODEL, **SETUPS[setup]) as server:
        startup = time.perf_counter() - began
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", timeout=300)
        answers = greedy_answers(client, prompts, answer_tokens)
        rate = one_request_rate(client, new_tokens, repeats)
    return SplitRun(setup, startup, answers, rate)


def compare_vllm_split(
    prompts: Sequence[str] = PROMPTS, answer_tokens: int = 16, new_tokens: int = 64, repeats: int = 3
) -> list[SplitRun]:
    """One SplitRun a setup of SETUPS (one rank on every core, then 2 ranks of one core), in that order.

    Needs vLLM (`make engines`): without it, start_vllm_server raises EngineNotInstalled saying so.
    """
    check_options(prompts, answer_tokens, new_tokens, repeats)
    return [run_setup(setup, prompts, answer_tokens, new_tokens, repeats) for setup in SETUPS]


def check_options(prompts: Sequence[str], answer_tokens: int, new_tokens: int, repeats: int) -> None:
    """A TypeError or ValueError naming the first bad argument of compare_vllm_split."""
    if not check_items("prompts", prompts, "prompt strings", of=str):
        raise ValueError("prompts must hold at least one prompt, e.g. ['The capital of France is'].")
    check_int("answer_tokens", answer_tokens, minimum=1)
    check_int("new_tokens", new_tokens, minimum=1)
    check_int("repeats", repeats, minimum=1)


def vllm_split_table(runs: Sequence[SplitRun]) -> str:
    """One line a setup: its start-up, one request's tokens/s against the first setup's, and whether its
    greedy answers equal the first setup's."""
    if not check_items("runs", runs, "SplitRun results of compare_vllm_split", of=SplitRun):
        raise ValueError("runs is empty: compare_vllm_split gives one SplitRun a setup.")
    first = runs[0]
    lines = [f"{'vLLM, ' + MODEL:<22} {'start-up':>9} {'tokens/s':>9} {'vs first':>9}  answers"]
    for run in runs:
        same = "the same" if run.answers == first.answers else "DIFFERENT"
        lines.append(
            f"{run.setup:<22} {run.startup_s:8.0f}s {run.tokens_per_s:9.1f} "
            f"{run.tokens_per_s / first.tokens_per_s:8.2f}x  {same if run is not first else '-'}"
        )
    return "\n".join(lines)


def compare_if_installed(
    prompts: Sequence[str] = PROMPTS, answer_tokens: int = 16, new_tokens: int = 64, repeats: int = 3
) -> list[SplitRun]:
    """compare_vllm_split's runs; where vLLM is not installed, [] and the hint printed instead (in CI,
    `CI=true`, which installs it, a missing vLLM raises EngineNotInstalled as compare_vllm_split does).

        >>> runs = compare_if_installed(new_tokens=16, repeats=1)
    """
    check_options(prompts, answer_tokens, new_tokens, repeats)
    if not vllm_installed() and os.environ.get("CI") != "true":
        print(f"vLLM's rows: skipped, vLLM is not installed. {MAKE_ENGINES}")
        return []
    return compare_vllm_split(prompts, answer_tokens, new_tokens, repeats)
