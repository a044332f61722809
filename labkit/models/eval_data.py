"""The evaluation data every quality measure reads: one text and one prompt set, in data/eval/.

Perplexity and bits per byte are only comparable on the same text, and greedy agreement only on the
same prompts, so every measure of the course reads them from here: the quantization table (quant/,
notebook 08), a model's bits per byte (quality.py, notebook 12) and the fast path's checks (notebook 13).
The files were written for this project (data/eval/README.md says how and why).

    >>> eval_ids(tokenizer).shape        # the whole text as SmolLM2 token ids [1, T]
    torch.Size([1, 3702])
    >>> len(eval_prompts(tokenizer))     # chat prompts, then plain-text prompts
    8
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.doors import check_tokenizer
from labkit.core.text import chat_prompt, encode_prompt

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "eval"


def data_file(name: str) -> Path:
    """The path of data/eval/`name`, or a FileNotFoundError that says how to get the data."""
    path = DATA_DIR / name
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing. The evaluation data lives in the repository's data/eval/ "
            "folder: install labkit from a checkout with `pip install -e .` (as `make lab` does)."
        )
    return path


def eval_text() -> str:
    """The evaluation text (prose and code, about 3,700 SmolLM2 tokens); see data/eval/README.md."""
    return data_file("eval_text.txt").read_text(encoding="utf-8")


def eval_prompts(tokenizer: PreTrainedTokenizerBase) -> list[list[int]]:
    """The fixed prompt set as token ids: chat prompts through the chat template, then text prompts."""
    prompts = json.loads(data_file("prompts.json").read_text(encoding="utf-8"))
    return [chat_prompt(tokenizer, text) for text in prompts["chat"]] + [
        encode_prompt(tokenizer, text) for text in prompts["text"]
    ]


def eval_ids(tokenizer: PreTrainedTokenizerBase, max_tokens: int | None = None) -> torch.Tensor:
    """The evaluation text as input ids [1, T], cut to its first max_tokens tokens if given."""
    check_tokenizer("tokenizer", tokenizer)
    ids = tokenizer(eval_text())["input_ids"]
    if max_tokens is not None:
        check_int("max_tokens", max_tokens, minimum=2, note="or None for the whole text")
        ids = ids[:max_tokens]
    return torch.tensor([ids])


def eval_ids_repeated(tokenizer: PreTrainedTokenizerBase, n_tokens: int) -> torch.Tensor:
    """The evaluation text as input ids [1, n_tokens], repeated from its start when it is shorter: a long
    context of real text for timing (labkit.benchmarks.longctx, labkit.engines.llama_kv).

        >>> eval_ids_repeated(tokenizer, 8192).shape
        torch.Size([1, 8192])
    """
    ids = eval_ids(tokenizer)  # the tokenizer checked first
    check_int("n_tokens", n_tokens, minimum=1)
    return ids.repeat(1, n_tokens // ids.shape[1] + 1)[:, :n_tokens]
