"""One request inside the serving engine: its tokens, its decoding options, its state and its clock.

An `EngineRequest` is plain Python. The scheduler moves it between states, the block manager gives it a
block table, the runner feeds it to the model, and the engine appends the tokens it chooses.

    waiting --(admitted: blocks allocated, prompt prefilled)--> running --(EOS, length, stop)--> finished
                  (in one step, or in chunks over several)
       ^                                                           |
       +---------(preempted: blocks freed, recomputed later)-------+        any state --abort--> aborted

    >>> seq = EngineRequest(0, [1, 2, 3], DecodingConfig(max_new_tokens=4), frozenset({2}), tokenizer, arrival_s=0.0)
    >>> seq.token_ids, seq.status
    ([1, 2, 3], <Status.WAITING: 'waiting'>)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.text import StopMatcher, TextStream
from labkit.decoding.config import DecodingConfig
from labkit.decoding.generate import choose
from labkit.decoding.request import text_and_finish


class Status(Enum):
    WAITING = "waiting"  # in the queue, no blocks
    RUNNING = "running"  # has blocks; its keys/values up to num_cached_tokens are in the pool
    FINISHED = "finished"  # EOS, max_new_tokens or a stop string; blocks freed
    ABORTED = "aborted"  # the user gave up on it; blocks freed


@dataclass(frozen=True)
class EngineRequestMetrics:
    """One request's times, in seconds, read off the engine's clock."""

    prompt_tokens: int  # tokens in the prompt
    output_tokens: int  # tokens generated (EOS included when it ended the request)
    queue_s: float  # arrival -> first scheduled
    ttft_s: float  # arrival -> first token (queue and prefill included)
    tpot_s: float  # mean gap between later tokens (nan for fewer than 2 tokens)
    e2e_s: float  # arrival -> finish
    finish_reason: str | None  # "eos", "length", "stop", "abort"


class EngineRequest:
    """A request: prompt ids, generated ids, its own options, generator, transforms and text stream."""

    def __init__(self, request_id: int, prompt_ids: list[int], config: DecodingConfig, eos_ids: frozenset[int],
                 tokenizer: PreTrainedTokenizerBase, arrival_s: float):
        self.request_id = request_id
        self.prompt_ids = list(prompt_ids)
        self.config = config
        self.eos_ids = eos_ids
        self.generator: torch.Generator = config.generator()  # seeded from config.seed: one draw per token
        self.transforms = config.transforms(len(prompt_ids), eos_ids)
        self.text = TextStream(tokenizer, prompt_ids)
        self.stopper = StopMatcher(config.stop)
        self.status = Status.WAITING
        self.output_ids: list[int] = []
        self.finish_reason: str | None = None
        self.block_table: list[int] = []  # pool block of each block_size tokens, set by the BlockManager
        self.num_cached_tokens = 0  # tokens whose keys/values are already in the pool
        self.arrival_s = arrival_s
        self.scheduled_s: float | None = None  # first admitted
        self.first_token_s: float | None = None
        self.finish_s: float | None = None
        self.logits: list[torch.Tensor] = []  # [V] per token, only when the engine records them

    @property
    def token_ids(self) -> list[int]:
        """Prompt then generated ids: what a recomputation after preemption feeds again."""
        return self.prompt_ids + self.output_ids

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def is_done(self) -> bool:
        return self.status in (Status.FINISHED, Status.ABORTED)

    @property
    def max_length(self) -> int:
        """The most tokens this request can ever hold: prompt + max_new_tokens."""
        return len(self.prompt_ids) + self.config.max_new_tokens

    def new_token_ids(self, n: int | None = None) -> list[int]:
        """The ids the next forward pass feeds: the first n tokens not yet cached (all of them by default:
        a whole prompt, or the last token when decoding); a chunk of a prompt when n is smaller."""
        end = len(self) if n is None else self.num_cached_tokens + n
        return self.token_ids[self.num_cached_tokens:end]

    def choose_next(self, logits: torch.Tensor) -> tuple[int, str, str | None]:
        """Choose this request's next token from its logits [1, V] as `labkit.generate` would (its own
        transforms, `choose`, its seeded generator) and append it; (token id, the text it adds, the finish
        reason: "eos", "length", "stop", or None while it goes on)."""
        token_id = int(choose(logits, self.config.temperature, self.generator, self.transforms, self.token_ids)[0])
        self.output_ids.append(token_id)
        last = len(self.output_ids) == self.config.max_new_tokens
        piece, finish = text_and_finish(token_id, last, self.eos_ids, self.text, self.stopper)
        return token_id, piece, finish

    def metrics(self) -> EngineRequestMetrics:
        """Times of a finished or aborted request (nan where an event never happened)."""
        def since(moment: float | None, start: float | None) -> float:
            return math.nan if moment is None or start is None else moment - start

        n = len(self.output_ids)
        tpot = since(self.finish_s, self.first_token_s) / (n - 1) if n > 1 else math.nan
        return EngineRequestMetrics(len(self.prompt_ids), n, since(self.scheduled_s, self.arrival_s),
                              since(self.first_token_s, self.arrival_s), tpot,
                              since(self.finish_s, self.arrival_s), self.finish_reason)

    def __repr__(self) -> str:
        return (f"EngineRequest({self.request_id}, {self.status.value}, {len(self.prompt_ids)} prompt + "
                f"{len(self.output_ids)} new tokens, cached {self.num_cached_tokens}, blocks {self.block_table})")
