"""One request inside the serving engine: its tokens, its decoding options, its state and its clock.

An `EngineRequest` is plain Python. The scheduler moves it between states, the block manager gives it a
block table, the runner feeds it to the model, and the engine appends the tokens it chooses.

    waiting --(admitted: blocks allocated, prompt prefilled)--> running --(EOS, length, stop)--> finished
                  (in one step, or in chunks over several)
       ^                                                           |
       +---------(preempted: blocks freed, recomputed later)-------+        any state --abort--> aborted

**n samples of one prompt** (parallel sampling, as vLLM's `n`): sample 0 is the request the scheduler
queues; samples 1..n-1 (`add_samples`) wait beside it, without blocks, in its `unforked` list. When its
prompt is prefilled, the scheduler forks them: each shares its block table (no copy) and chooses its
first token from the same logits. Sample i's generator is seeded with seed + i (vLLM V1's child seeds),
so sample 0 is the request alone with the same seed. From then on each sample is a request of its own.

**Log-probabilities** (`logprobs=k`): each chosen token's log-probability and the k most likely tokens',
from log_softmax of the model's raw logits in float32: the model's own distribution, before penalties,
temperature, top-k or top-p (vLLM's default "raw_logprobs", and `Step.logprob` of `labkit.generate`).

    >>> seq = EngineRequest(0, [1, 2, 3], DecodingConfig(max_new_tokens=4), frozenset({2}), tokenizer, arrival_s=0.0)
    >>> seq.token_ids, seq.status
    ([1, 2, 3], <Status.WAITING: 'waiting'>)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.text import StopMatcher, TextStream
from labkit.decoding.config import DecodingConfig
from labkit.decoding.generate import choose
from labkit.decoding.request import text_and_finish
from labkit.metrics import time_per_output_token


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
    draft_n: int = 0  # draft tokens it fed (speculative decoding; llama-server's timings name)
    draft_n_accepted: int = 0  # ... and kept


MAX_LOGPROBS = 20  # the most alternatives a token's log-probabilities list (OpenAI's top_logprobs limit)


@dataclass(frozen=True)
class TokenLogprob:
    """A chosen token's log-probability and the most likely tokens', under the model's raw distribution."""

    token_id: int  # the chosen token
    logprob: float  # log_softmax(raw logits)[token_id], float32: before penalties, temperature, top-k/top-p
    top: tuple[tuple[int, float], ...]  # the k most likely tokens as (token id, logprob), most likely first


def token_logprob(logits: torch.Tensor, token_id: int, k: int) -> TokenLogprob:
    """logits [V] (the model's raw scores) -> the chosen token's log-probability and the top k, in float32.

    >>> token_logprob(torch.tensor([2.0, 0.0, 1.0]), 2, k=1)
    TokenLogprob(token_id=2, logprob=-1.41..., top=((0, -0.41...),))
    """
    logprobs = torch.log_softmax(logits.float(), dim=-1)  # [V]
    values, ids = logprobs.topk(k)  # sorted, most likely first
    return TokenLogprob(token_id, float(logprobs[token_id]), tuple(zip(ids.tolist(), values.tolist())))


def sample_generator(config: DecodingConfig, sample_index: int) -> torch.Generator:
    """Sample i's generator: seeded with seed + i (vLLM V1's child seeds), or unseeded without a seed."""
    return (
        config.generator()
        if config.seed is None
        else torch.Generator().manual_seed(config.seed + sample_index)
    )


class EngineRequest:
    """A request: prompt ids, generated ids, its own options, generator, transforms and text stream.

    sample_index / group_id: sample i of the n that share one prompt (0 and its own id for a request
    of one); logprobs: None, or how many alternatives each token's `TokenLogprob` lists (0 to 20);
    max_draft: its cap on speculation's draft tokens a step (None: the engine's `Speculation.max_draft`).
    """

    def __init__(
        self,
        request_id: int,
        prompt_ids: list[int],
        config: DecodingConfig,
        eos_ids: frozenset[int],
        tokenizer: PreTrainedTokenizerBase,
        arrival_s: float,
        sample_index: int = 0,
        group_id: int | None = None,
        logprobs: int | None = None,
        max_draft: int | None = None,
    ):
        self.request_id = request_id
        self.prompt_ids = list(prompt_ids)
        self.config = config
        self.eos_ids = eos_ids
        self.tokenizer = tokenizer
        self.sample_index = (
            sample_index  # which of its group's samples: its generator is seeded with seed + i
        )
        self.group_id = request_id if group_id is None else group_id  # the request id of its group's sample 0
        self.siblings: list[EngineRequest] = []  # on sample 0: samples 1..n-1, in index order
        self.unforked: list[EngineRequest] = []  # on sample 0 until its prompt is prefilled: siblings to fork
        self.generator: torch.Generator = sample_generator(config, sample_index)  # one draw per token
        self.transforms = config.transforms(len(prompt_ids), eos_ids)
        self.text = TextStream(tokenizer, prompt_ids)
        self.stopper = StopMatcher(config.stop)
        self.status = Status.WAITING
        self.output_ids: list[int] = []
        self.finish_reason: str | None = None
        self.block_table: list[int] = []  # pool block of each block_size tokens, set by the BlockManager
        self.window_table: list[int] = []  # a Gemma3's local layers' blocks (NULL_BLOCK: left the window)
        self.num_cached_tokens = 0  # tokens whose keys/values are already in the pool
        self.prefix_cached_tokens: int | None = None  # prompt tokens the prefix cache held at first admission
        self.arrival_s = arrival_s
        self.scheduled_s: float | None = None  # first admitted
        self.first_token_s: float | None = None
        self.finish_s: float | None = None
        self.logits: list[torch.Tensor] = []  # [V] per token, only when the engine records them
        self.n_logprobs = (
            logprobs  # None: no log-probabilities; k: each token's and the k most likely tokens'
        )
        self.logprobs: list[TokenLogprob] = []  # one per generated token when n_logprobs is not None
        self.max_draft = (
            max_draft  # its cap on draft tokens a step (RequestSpec.max_draft; None: the engine's)
        )
        self.drafting = None  # its DraftState (labkit.serving.speculation) once the engine drafts for it
        self.draft_n = 0  # draft tokens it fed
        self.draft_n_accepted = 0  # ... and kept

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
    def seats(self) -> int:
        """Seats this request takes in the running set: itself, and the samples still to fork from it."""
        return 1 + len(self.unforked)

    def add_samples(self, request_ids: Sequence[int]) -> list[EngineRequest]:
        """Samples 1, 2, ... of this request (sample 0), one per id: the same prompt and options, each its
        own generator and text. They wait without blocks in `unforked` until `Scheduler.fork`.

            >>> [s.sample_index for s in seq.add_samples([7, 8])]
            [1, 2]
        """
        if self.sample_index != 0 or self.siblings or self.output_ids:
            raise ValueError(f"Only a new request (sample 0, no sample yet) can take samples; {self} cannot.")
        self.siblings = [
            EngineRequest(
                request_id,
                self.prompt_ids,
                self.config,
                self.eos_ids,
                self.tokenizer,
                self.arrival_s,
                index,
                self.request_id,
                self.n_logprobs,
            )
            for index, request_id in enumerate(request_ids, start=1)
        ]
        self.unforked = list(self.siblings)
        return self.siblings

    @property
    def max_length(self) -> int:
        """The most tokens this request can ever hold: prompt + max_new_tokens."""
        return len(self.prompt_ids) + self.config.max_new_tokens

    def new_token_ids(self, n: int | None = None) -> list[int]:
        """The ids the next forward pass feeds: the first n tokens not yet cached (all of them by default:
        a whole prompt, or the last token when decoding); a chunk of a prompt when n is smaller."""
        end = len(self) if n is None else self.num_cached_tokens + n
        return self.token_ids[self.num_cached_tokens : end]

    def choose_next(self, logits: torch.Tensor, token_id: int | None = None) -> tuple[int, str, str | None]:
        """Choose this request's next token from its logits [1, V] as `labkit.generate` would (its own
        transforms, `choose`, its seeded generator) and append it, with its `TokenLogprob` when asked; (token
        id, the text it adds, the finish reason: "eos", "length", "stop", or None while it goes on).
        token_id: the token already chosen from these logits (by speculative verification), appended as is."""
        if token_id is None:
            token_id = int(
                choose(logits, self.config.temperature, self.generator, self.transforms, self.token_ids)[0]
            )
        if self.n_logprobs is not None:  # only when asked: a log_softmax over the vocabulary per token
            self.logprobs.append(token_logprob(logits[0], token_id, self.n_logprobs))
        self.output_ids.append(token_id)
        last = len(self.output_ids) == self.config.max_new_tokens
        piece, finish = text_and_finish(token_id, last, self.eos_ids, self.text, self.stopper)
        return token_id, piece, finish

    def metrics(self) -> EngineRequestMetrics:
        """Times of a finished or aborted request (nan where an event never happened)."""

        def since(moment: float | None, start: float | None) -> float:
            return math.nan if moment is None or start is None else moment - start

        n = len(self.output_ids)
        first, finish = self.first_token_s, self.finish_s
        tpot = math.nan if first is None or finish is None else time_per_output_token(first, finish, n)
        return EngineRequestMetrics(
            len(self.prompt_ids),
            n,
            since(self.scheduled_s, self.arrival_s),
            since(self.first_token_s, self.arrival_s),
            tpot,
            since(self.finish_s, self.arrival_s),
            self.finish_reason,
            self.draft_n,
            self.draft_n_accepted,
        )

    def __repr__(self) -> str:
        return (
            f"EngineRequest({self.request_id}, {self.status.value}, {len(self.prompt_ids)} prompt + "
            f"{len(self.output_ids)} new tokens, cached {self.num_cached_tokens}, blocks {self.block_table})"
        )
