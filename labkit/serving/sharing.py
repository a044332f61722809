"""What n samples from one prefill save: the engine's `add_request(prompt, n=16)` against 16 separate
requests for the same prompt (notebook 14, section 2).

With `n=16` the prompt is prefilled once and its blocks are shared by the 16 samples; only the partly
filled last prompt block is copied, by each sample on its first write (copy on write). Sixteen separate
requests each prefill the whole prompt and hold their own copy of every block, unless a prefix cache
finds the earlier request's blocks: labkit's engine, like vLLM's, names full prompt blocks and shares them.
To see what the sharing of `n` itself saves, the separate requests run here with the prefix cache off
(vLLM's `enable_prefix_caching=False`), so each computes and stores its prompt.

Sample i of the shared request draws with seed + i, exactly as a separate request with seed + i would:
the two ways give the same 16 answers, so only the cost differs.

    >>> shared, separate = sharing_costs(model, tokenizer, prompt, n=16, temperature=0.8, max_new_tokens=16, seed=0)
    >>> shared.texts == separate.texts, shared.prompt_tokens_computed, separate.prompt_tokens_computed
    (True, 118, 1888)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.text import encode_prompt
from labkit.decoding.request import Prompt, resolve_config
from labkit.serving.block_manager import BlockManager
from labkit.serving.engine import Engine

BLOCK_SIZE = 16  # tokens per KV block (the engine's default)


class NoPrefixCache(BlockManager):
    """A BlockManager that never finds a prompt's blocks in the pool: every request computes and holds all
    of its own (forks of one request still share theirs)."""

    def cached_prefix(self, token_ids: Sequence[int]) -> list[int]:
        return []


def without_prefix_cache(engine: Engine) -> Engine:
    """The engine, before its first request, with its prefix cache turned off; returned for chaining.

    >>> engine = without_prefix_cache(Engine(model, tokenizer, max_num_seqs=16))
    """
    if engine.requests or engine.step_metrics:
        raise ValueError("Turn the prefix cache off before the engine's first request.")
    old = engine.block_manager
    window = None if old.window is None else old.window.allocator
    manager = NoPrefixCache(old.allocator, old.block_size, window, old.sliding_window)
    engine.block_manager = engine.scheduler.block_manager = manager
    return engine


@dataclass(frozen=True)
class SharingRun:
    """One way of asking for n samples of a prompt, and its cost on the engine."""

    label: str
    texts: tuple[str, ...]  # sample i's text (seed + i)
    prompt_tokens_computed: int  # prompt tokens fed through the model (prefill steps)
    generated_tokens: int
    peak_blocks: int  # KV blocks in use after the busiest step
    wall_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.wall_s

    def describe(self) -> str:
        return (
            f"{self.label:<38}{self.prompt_tokens_computed:>8,} prompt tokens computed  {self.peak_blocks:>4} "
            f"KV blocks at most  {self.generated_tokens:>4} tokens in {self.wall_s:5.2f} s: "
            f"{self.tokens_per_s:5.1f} tokens/s"
        )


def engine_for_samples(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, prompt_tokens: int, new_tokens: int, n: int
) -> Engine:
    """A fresh engine with n seats and KV blocks (of BLOCK_SIZE tokens) for n whole samples: each sample's
    prompt and new tokens, plus one block for its copy on first write.

        >>> engine_for_samples(model, tokenizer, prompt_tokens=300, new_tokens=32, n=8).pool.allocator.n_blocks
        176
    """
    per_sample = math.ceil((prompt_tokens + new_tokens) / BLOCK_SIZE) + 1
    return Engine(model, tokenizer, max_num_seqs=n, block_size=BLOCK_SIZE, n_blocks=n * per_sample)


def run_requests(
    engine: Engine, label: str, prompt: Prompt, seeds: Sequence[int], n: int, options: dict
) -> SharingRun:
    """Add one request per seed (each with n samples), step until done, and measure the run."""
    start = engine.clock()
    heads = [engine.add_request(prompt, n=n, seed=seed, **options) for seed in seeds]
    samples = [sample for head in heads for sample in engine.samples(head)]
    texts = {sample: "" for sample in samples}
    for out in engine.run_until_done():
        texts[out.request_id] += out.text
    wall_s = engine.clock() - start
    steps = list(engine.step_metrics)
    return SharingRun(
        label,
        tuple(texts[sample] for sample in samples),
        sum(step.n_tokens for step in steps if step.kind == "prefill"),
        sum(len(engine.requests[sample].output_ids) for sample in samples),
        max(step.blocks_used for step in steps),
        wall_s,
    )


def sharing_costs(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt: Prompt,
    n: int = 16,
    seed: int = 0,
    **options,
) -> tuple[SharingRun, SharingRun]:
    """(one request with n samples, n separate requests with the prefix cache off), each on a fresh engine
    with n seats; options: the decoding options of every sample (a temperature above 0 to differ).

        >>> shared, separate = sharing_costs(model, tokenizer, prompt, n=16, temperature=0.8, max_new_tokens=16)
        >>> print(shared.describe()); print(separate.describe())
    """
    check_int("n", n, minimum=1, note="samples of the prompt")
    check_int("seed", seed, minimum=0)
    sizes = (
        len(encode_prompt(tokenizer, prompt)),
        resolve_config(None, options, "sharing_costs").max_new_tokens,
        n,
    )
    shared = run_requests(
        engine_for_samples(model, tokenizer, *sizes),
        f"1 request, n={n} (one prefill)",
        prompt,
        [seed],
        n,
        options,
    )
    alone = without_prefix_cache(engine_for_samples(model, tokenizer, *sizes))
    separate = run_requests(
        alone, f"{n} separate requests, no prefix cache", prompt, range(seed, seed + n), 1, options
    )
    return shared, separate
