"""Batch-1 greedy decoding of SmolLM2 (fp32): labkit's loop vs transformers `generate`."""

from __future__ import annotations

from collections.abc import Callable

import torch

from labkit.benchmarks.comparison import comparison
from labkit.core.llama import Llama
from labkit.decoding.generate import generate_ids
from labkit.models.loading import load_model
from labkit.table import Column, format_table
from labkit.this_machine import machine_name
from labkit.timing import median_tokens_per_second

BENCH_PROMPT = "The history of the Roman Empire begins with"  # plain text: rarely ends early


def hf_run(hf_model: torch.nn.Module, prompt_ids: list[int], new_tokens: int) -> Callable[[], int]:
    """A run of transformers `generate`, greedy: returns the number of tokens produced."""
    input_ids = torch.tensor([prompt_ids])

    def run() -> int:
        with torch.no_grad():
            out = hf_model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=new_tokens,
                do_sample=False,
            )
        return out.shape[1] - input_ids.shape[1]

    return run


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    new_tokens = 8 if quick else 128
    hf_model, tokenizer = load_model("smollm2-135m")
    labkit_model = Llama.from_hf(hf_model)
    prompt_ids = tokenizer(BENCH_PROMPT)["input_ids"]

    def labkit_loop(model) -> Callable[[], int]:
        return lambda: len(generate_ids(model, tokenizer, prompt_ids, max_new_tokens=new_tokens))

    rates = {
        "labkit loop + labkit Llama": median_tokens_per_second(labkit_loop(labkit_model), repeats),
        "labkit loop + transformers model": median_tokens_per_second(labkit_loop(hf_model), repeats),
        "transformers generate": median_tokens_per_second(hf_run(hf_model, prompt_ids, new_tokens), repeats),
    }
    peer = rates["transformers generate"]
    print(f"decode: SmolLM2-135M fp32, batch 1, greedy, {new_tokens} new tokens, median of {repeats}")
    print(f"machine: {machine_name()}")
    columns = [
        Column("implementation", 36, align="<"),
        Column("tokens/s", 10, ".1f"),
        Column("vs transformers", 18),
    ]
    print(format_table(columns, [[name, rate, f"{rate / peer:.2f}x"] for name, rate in rates.items()]))
    return [
        comparison(
            "decode", "tokens_per_second", rates["labkit loop + labkit Llama"], peer, "transformers generate"
        ),
        comparison(
            "decode_loop_only",
            "tokens_per_second",
            rates["labkit loop + transformers model"],
            peer,
            "transformers generate",
        ),
    ]
