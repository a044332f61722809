"""Speculative decoding (greedy) vs plain greedy decoding of the same model: SmolLM2, labkit Llama + KVCache.

Two task types: extractive (the answer repeats the prompt: prompt lookup shines) and open-ended writing.
Drafters: prompt lookup, and early-exit self-drafting (SmolLM2's first k layers + its head, untrained).
Every run is checked token for token against plain greedy decoding.

Aims: prompt lookup at least 1.8x on extractive prompts, never below 0.9x on open-ended ones; the
early-exit drafter's acceptance rate and speed-up are reported as measured.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from labkit.benchmarks.comparison import comparison
from labkit.benchmarks.progress import progress
from labkit.core.llama import Llama
from labkit.core.text import chat_prompt
from labkit.decoding.generate import generate_ids
from labkit.models.loading import load_model
from labkit.speculative.drafters import PromptLookupDrafter, early_exit_drafter, early_exit_model
from labkit.speculative.generate import speculative_generate
from labkit.table import Column, format_table
from labkit.this_machine import machine_name
from labkit.timing import median_seconds

PASSAGE = (
    "The old lighthouse stood at the edge of the cliff for more than two hundred years. Every night its "
    "keeper climbed the spiral stairs, trimmed the wick, and watched the beam sweep across the dark water, "
    "guiding fishing boats safely back to the harbour below."
)
TASKS = {
    "extractive": "Repeat the following text exactly, word for word:\n\n" + PASSAGE,
    "open-ended": "Write a short story about a robot who learns to paint.",
}


def step_cost(draft: torch.nn.Module, target: Llama, context: int = 64, repeats: int = 5) -> float:
    """c: seconds of one draft decode step / seconds of one target decode step (Leviathan et al.'s c)."""
    ids = torch.randint(
        0, target.config.vocab_size, (1, context + 1), generator=torch.Generator().manual_seed(0)
    )

    def one_step(model) -> Callable[[], object]:
        cache = model.new_cache(1, context + 1)
        with torch.no_grad():
            model(ids[:, :context], cache)

        def run():
            cache.crop(context)
            with torch.no_grad():
                model(ids[:, context:], cache)

        return run

    return median_seconds(one_step(draft), repeats) / median_seconds(one_step(target), repeats)


def drafters_for(model: Llama, quick: bool) -> list[tuple[str, object, int, bool]]:
    """(label, drafter, gamma, adaptive) to compare; early exit at a few depths."""
    # n-grams of 2-3 tokens: a lone repeated token is too weak a hint on open-ended text (it costs ~0.8x)
    rows = [("prompt lookup", PromptLookupDrafter(max_ngram_size=3, min_ngram_size=2), 8, True)]
    for k in (4,) if quick else (4, 12, 24):
        rows.append((f"early exit k={k}", early_exit_drafter(model, k), 2, False))
    return rows


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    new_tokens = 8 if quick else 64
    model, tokenizer = load_model("smollm2-135m", impl="labkit")
    records, lines = [], []
    for task, request in TASKS.items():
        prompt = chat_prompt(tokenizer, request)
        progress("speculative", f"{task}: plain greedy, {new_tokens} new tokens")
        plain_ids = generate_ids(model, tokenizer, prompt, max_new_tokens=new_tokens)
        plain_s = median_seconds(
            lambda: generate_ids(model, tokenizer, prompt, max_new_tokens=new_tokens), repeats
        )
        plain_rate = len(plain_ids) / plain_s
        lines.append((task, "plain greedy", "-", "-", "1.00", plain_rate, 1.0, True))
        for label, drafter, gamma, adaptive in drafters_for(model, quick):
            progress("speculative", f"{task}: {label}, gamma={gamma}")

            def spec():
                return speculative_generate(
                    model,
                    tokenizer,
                    prompt,
                    drafter=drafter,
                    gamma=gamma,
                    max_new_tokens=new_tokens,
                    adaptive=adaptive,
                )

            result = spec()
            seconds = median_seconds(spec, repeats)
            rate = len(result.token_ids) / seconds
            stats = result.stats
            lines.append(
                (
                    task,
                    label,
                    gamma,
                    f"{stats.acceptance_rate:.2f}",
                    f"{stats.tokens_per_call:.2f}",
                    rate,
                    rate / plain_rate,
                    result.token_ids == plain_ids,
                )
            )
            records.append(
                comparison(
                    f"speculative_{task}_{label.replace(' ', '_')}",
                    "tokens_per_second",
                    rate,
                    plain_rate,
                    f"plain greedy decoding, labkit Llama + KVCache ({task})",
                )
            )
    costs = {k: step_cost(early_exit_model(model, k), model) for k in ((4,) if quick else (4, 12, 24))}
    _print_table(lines, costs, new_tokens, repeats)
    return records


TABLE_COLUMNS = [
    Column("task", 12, align="<"),
    Column("decoder", 20, align="<"),
    Column("gamma", 6),
    Column("alpha", 7),
    Column("tok/call", 10),
    Column("tok/s", 8, ".1f"),
    Column("speed-up", 10),
    Column("", 2),
    Column("same tokens", 0, align="<"),
]


def _print_table(lines, costs: dict[int, float], new_tokens: int, repeats: int) -> None:
    print(
        f"speculative: SmolLM2-135M fp32 on labkit's Llama + KVCache, batch 1, greedy, {new_tokens} new tokens, "
        f"median of {repeats}"
    )
    print(f"machine: {machine_name()}")
    rows = [
        [task, label, str(gamma), alpha, per_call, rate, f"{speedup:.2f}x", "", same]
        for task, label, gamma, alpha, per_call, rate, speedup, same in lines
    ]
    print(format_table(TABLE_COLUMNS, rows))
    print(
        "aims: prompt lookup >= 1.8x on extractive, >= 0.9x on open-ended "
        "(prompt lookup: 2-3-grams, gamma up to 8, adaptive)"
    )
    print(
        "early-exit draft cost c (one draft step / one target step): "
        + ", ".join(f"k={k}: {c:.2f}" for k, c in costs.items())
    )
