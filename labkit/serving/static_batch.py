"""A real static batch: prompts padded to the longest, every row decoding until the longest answer ends.

The batch is fixed when it starts. Its prompts are prefilled in one forward pass, each padded to the
longest prompt of the batch; then every row feeds one token per step, **finished or not**, until the
last row is done. A row that ended early keeps its seat and its slot in every later step, and no new
request can take it: the waste static batching is defined by. `Waste` counts it, as notebook 10's
`wasted_slots` does: padding slots of the prefill plus idle slots of finished rows; `planned_waste`
counts it from the lengths alone, before any batch runs.

It runs on the Engine's own forward path (`BatchKV` over a `BlockPool`, each row in its own blocks),
right-padded: a row's real tokens sit at its true positions, the padding is masked and its keys are
never read. The cost is that of a left-padded batch: B x longest-prompt tokens in the prefill, then
B rows per step, each attending over the longest row's keys. Each row chooses its tokens with its
own options, as `labkit.generate` would (same transforms, `choose`, generator, stop handling).

    >>> batch = StaticBatch(model, tokenizer, [ids_a, ids_b], [DecodingConfig(max_new_tokens=8)] * 2)
    >>> while not batch.done:
    ...     for row, token_id in batch.step():
    ...         print(row, token_id)
    >>> batch.waste.share                          # wasted slots / slots fed to the model
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.forward import check_context, context_length
from labkit.core.paged import BlockPool
from labkit.decoding.config import DecodingConfig
from labkit.decoding.request import Prompt, check_request
from labkit.serving.request import EngineRequest, Status
from labkit.serving.runner import forward_padded, require_llama


@dataclass(frozen=True)
class Waste:
    """Token slots a static batch fed to the model, and how many of them did no work.

    >>> Waste(fed=10, padding=2, idle=3).share
    0.5
    """

    fed: int = 0  # batch rows x tokens per row, every forward pass
    padding: int = 0  # prefill slots past a row's own prompt (prompts padded to the longest)
    idle: int = 0  # slots of rows already finished, kept decoding until the longest answer ends

    @property
    def wasted(self) -> int:
        """padding + idle: notebook 10's `wasted_slots`, summed over the batches."""
        return self.padding + self.idle

    @property
    def share(self) -> float:
        return self.wasted / self.fed if self.fed else 0.0

    def __add__(self, other: Waste) -> Waste:
        return Waste(self.fed + other.fed, self.padding + other.padding, self.idle + other.idle)


class StaticBatch:
    """A padded batch of prompts stepped together until its longest answer is done (see the module doc)."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        prompts: Sequence[Prompt],
        configs: Sequence[DecodingConfig],
        block_size: int = 16,
    ):
        require_llama(model)
        if not prompts or len(prompts) != len(configs):
            raise ValueError(
                f"Give one DecodingConfig per prompt, at least one: got {len(prompts)} prompts "
                f"and {len(configs)} configs."
            )
        requests = [
            check_request(model, tokenizer, p, c, {}, "StaticBatch") for p, c in zip(prompts, configs)
        ]
        if any(r.config.num_beams > 1 for r in requests):
            raise ValueError(
                "A static batch samples one sequence per request; for beam search use labkit.generate."
            )
        longest, most_new = (
            max(len(r.prompt_ids) for r in requests),
            max(r.config.max_new_tokens for r in requests),
        )
        # a finished row runs on as far as the longest
        check_context(longest, most_new, context_length(model))
        per_row = math.ceil((longest + most_new) / block_size)
        self.model = model
        self.rows = [
            EngineRequest(b, r.prompt_ids, r.config, r.eos_ids, tokenizer, 0.0)
            for b, r in enumerate(requests)
        ]
        for row in self.rows:
            row.status = Status.FINISHED if row.config.max_new_tokens == 0 else Status.RUNNING
        self.pool = BlockPool.for_model(model, per_row * len(requests), block_size)
        self.tables = [list(range(b * per_row, (b + 1) * per_row)) for b in range(len(requests))]
        self.cached = [0] * len(requests)  # tokens of each row already in the pool (padding excluded)
        self.waste = Waste()

    @property
    def done(self) -> bool:
        """Every row finished: only then does the batch give back its seats."""
        return all(row.is_done for row in self.rows)

    def step(self) -> list[tuple[int, int]]:
        """One forward pass over every row (the padded prefill first, then one token each); the (row, token
        id) of the rows still generating.

            >>> batch.step()                       # the prefill: every row's first token
            [(0, 504), (1, 1096)]
        """
        if self.done:
            raise RuntimeError("This static batch is done; start a new one for the next requests.")
        prefill = not any(self.cached)
        # a finished row repeats its last token; its output is dropped
        feeds = [row.prompt_ids if prefill else row.token_ids[-1:] for row in self.rows]
        logits = self.forward(feeds)  # [B, V]
        live = [not row.is_done for row in self.rows]
        self.waste += slot_waste([len(f) for f in feeds], live)
        self.cached = [c + len(f) for c, f in zip(self.cached, feeds)]
        return [(b, self.choose(row, logits[b : b + 1])) for b, row in enumerate(self.rows) if live[b]]

    @staticmethod
    def choose(row: EngineRequest, logits: torch.Tensor) -> int:
        """The row's next token from its logits [1, V], as labkit.generate would; the row is done on EOS,
        length or a stop string."""
        token_id, _, finish = row.choose_next(logits)
        if finish is not None:
            row.status = Status.FINISHED
        return token_id

    def forward(self, feeds: list[list[int]]) -> torch.Tensor:
        """Feed each row its tokens, right-padded to the longest: the logits after each row's last one, [B, V]."""
        return forward_padded(self.model, self.pool, feeds, self.tables, self.cached)


def planned_waste(prompt_lengths: Sequence[int], output_lengths: Sequence[int]) -> Waste:
    """What ONE static batch of prompts and answers of these lengths feeds and wastes, counted from the
    lengths alone as `StaticBatch` counts it while running: B x the longest prompt in the prefill, then B
    rows per decode step until the longest answer is done (its last token is never fed back).

        >>> planned_waste([5, 9, 3], [10, 4, 7])
        Waste(fed=54, padding=10, idle=9)
    """
    rows, longest_prompt, longest_answer = len(prompt_lengths), max(prompt_lengths), max(output_lengths)
    padding = sum(longest_prompt - n for n in prompt_lengths)
    idle = sum(longest_answer - n for n in output_lengths)
    return Waste(rows * (longest_prompt + longest_answer - 1), padding, idle)


def slot_waste(n_fed: list[int], live: list[bool]) -> Waste:
    """The slots of one forward pass of B rows padded to max(n_fed): padding of live rows, all of finished ones.

    >>> slot_waste([5, 3, 1], [True, True, False])
    Waste(fed=15, padding=2, idle=5)
    """
    width = max(n_fed)
    padding = sum(width - n for n, alive in zip(n_fed, live) if alive)
    return Waste(width * len(n_fed), padding, width * live.count(False))
