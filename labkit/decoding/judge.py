"""Diversity vs quality of decoding settings: many samples drawn as one batch, judged by another model.

A model that scores its own samples prefers its own most likely text, so greedy wins by construction.
Here quality comes from an independent **judge**: a different model (Gemma-3-270M in notebook 04), with
its own tokenizer, reads the decoded *text* after the same prompt text and reports its bits per byte
(the text's negative log-likelihood in bits over its UTF-8 bytes; lower means more predictable).

    >>> rows = sample_batch(model, tokenizer, prompt_ids, DecodingConfig(temperature=1.0, max_new_tokens=24), n=20)
    >>> texts = [tokenizer.decode(row, skip_special_tokens=True) for row in rows]
    >>> bits = judge_bits_per_byte(judge, judge_tokenizer, "Write a story.\\n\\n", texts)   # [20]
    >>> summarize("T=1.0", texts, bits)
    SettingResult(name='T=1.0', distinct_2=0.90, mean=1.62, low=1.36, high=1.87, ...)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.doors import check_items
from labkit.core.forward import crop_cache, decode_step, forward, model_device, prefill
from labkit.core.text import chat_prompt
from labkit.decoding.config import DecodingConfig
from labkit.decoding.diversity import distinct_n
from labkit.decoding.request import check_request
from labkit.decoding.sampling import greedy, sample
from labkit.decoding.transforms import apply_transforms


def sample_batch(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt_ids: Sequence[int],
    config: DecodingConfig,
    n: int,
    seed: int = 0,
    prefilled: tuple | None = None,
) -> list[list[int]]:
    """n continuations of one prompt, decoded together: one prefill of [n, P], then one decode step
    of [n, 1] per new token, all rows in one KV cache.

    Row i draws with its own generator seeded `seed + i`, so it is the sequence that
    `generate_ids(model, tokenizer, prompt_ids, config.replace(seed=seed + i))` gives (batched matmuls may
    round differently in the last bit, which changes a draw only on an exact knife-edge). Each row ends
    at its first EOS, included as in `generate_ids`. Stop strings and beam search are not supported.
    prefilled: `prefill(model, ids [n, P], max_length=...)`'s (logits, cache) to share between settings;
    the cache is cropped back to the prompt afterwards.

        >>> rows = sample_batch(model, tokenizer, prompt_ids, DecodingConfig(temperature=0.7), n=4, seed=0)
        >>> len(rows)
        4
    """
    check_int("n", n, minimum=1)
    if config.stop or config.num_beams > 1:
        raise ValueError(
            "sample_batch() samples plain continuations: drop stop= and num_beams (use generate)."
        )
    request = check_request(model, tokenizer, list(prompt_ids), config, {}, "sample_batch")
    prompt, eos, device = request.prompt_ids, request.eos_ids, model_device(model)
    transforms = request.config.transforms(len(prompt), eos)
    generators = [torch.Generator().manual_seed(seed + i) for i in range(n)]
    seen = torch.tensor([prompt] * n)  # [n, P + generated], on the CPU like generate's draws
    logits, cache = prefilled or prefill(
        model, seen.to(device), max_length=len(prompt) + config.max_new_tokens
    )
    if logits.shape[0] != n:
        raise ValueError(f"prefilled holds {logits.shape[0]} rows, but n={n} samples were asked for.")
    for step in range(config.max_new_tokens):
        processed = apply_transforms(logits.float().cpu(), seen, transforms)
        if config.temperature == 0:
            tokens = greedy(processed)
        else:
            probs = torch.softmax(processed, dim=-1)
            tokens = torch.cat([sample(probs[i : i + 1], g) for i, g in enumerate(generators)])
        seen = torch.cat([seen, tokens[:, None]], dim=1)
        if step == config.max_new_tokens - 1 or all(
            set(row) & eos for row in seen[:, len(prompt) :].tolist()
        ):
            break
        logits = decode_step(model, tokens.to(device), cache)
    if seen.shape[1] > len(prompt) + 1:  # the cache holds the prompt and all but the last new token
        crop_cache(cache, len(prompt))
    return [until_eos(row, eos) for row in seen[:, len(prompt) :].tolist()]


def until_eos(ids: Sequence[int], eos_ids: frozenset[int] | set[int]) -> list[int]:
    """ids up to and including the first EOS token (all of them if there is none).

    >>> until_eos([5, 6, 2, 7], {2})
    [5, 6, 2]
    """
    for index, token in enumerate(ids):
        if token in eos_ids:
            return list(ids[: index + 1])
    return list(ids)


def judge_bits_per_byte(
    judge: torch.nn.Module, judge_tokenizer: PreTrainedTokenizerBase, prompt_text: str, texts: Sequence[str]
) -> torch.Tensor:
    """Bits per byte [n] of each text under the judge, given prompt_text, in one forward pass.

    Each row is the judge's tokens of prompt_text (its BOS included) then of the text; rows are
    right-padded, which causal attention never lets a real token see. Only the positions that predict
    text tokens get logits (the judge's vocabulary may be large); each distinct text is scored once.
    A text with no bytes scores nan.

        >>> judge_bits_per_byte(judge, judge_tokenizer, "Write a story.\\n\\n", ["Once upon a time.", "Zq!"]).shape
        torch.Size([2])
    """
    unique = list(dict.fromkeys(texts))
    if len(unique) < len(texts):  # greedy gives n copies of one text: score it once
        scores = dict(zip(unique, judge_bits_per_byte(judge, judge_tokenizer, prompt_text, unique).tolist()))
        return torch.tensor([scores[text] for text in texts])
    prompt = judge_tokenizer(prompt_text)["input_ids"]
    pieces = [judge_tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    width = len(prompt) + max((len(p) for p in pieces), default=0)
    pad = judge_tokenizer.pad_token_id if judge_tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([prompt + p + [pad] * (width - len(prompt) - len(p)) for p in pieces])  # [n, width]
    if width == len(prompt):
        return torch.full((len(texts),), math.nan)
    keep = width - len(prompt) + 1  # positions len(prompt)-1 .. width-1 predict the text tokens
    logits = forward(judge, ids.to(model_device(judge)), keep=keep)[:, :-1].float().cpu()  # [n, width-P, V]
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, len(prompt) :, None]).squeeze(-1)
    real = torch.tensor([[j < len(p) for j in range(width - len(prompt))] for p in pieces])
    nats = -(logprobs * real).sum(dim=-1)  # [n]
    n_bytes = torch.tensor([len(text.encode("utf-8")) for text in texts], dtype=torch.float32)
    bits = nats / math.log(2) / n_bytes
    return bits.masked_fill(n_bytes == 0, math.nan)


@dataclass(frozen=True)
class SettingResult:
    """One decoding setting's samples, summarised: diversity and the judge's bits per byte."""

    name: str  # e.g. "T=1.0, top_p=0.9"
    distinct_2: float  # distinct-2 over all the samples together, in [0, 1]
    mean: float  # mean bits per byte over the samples (lower: the judge finds the text more likely)
    low: float  # 95% interval of that mean (mean -/+ 1.96 standard errors)
    high: float
    q1: float  # quartiles of the per-sample bits per byte
    median: float
    q3: float
    n: int  # how many samples were scored
    texts: tuple[str, ...] = field(default=(), repr=False)  # the samples themselves


def summarize(name: str, texts: Sequence[str], bits: torch.Tensor) -> SettingResult:
    """A SettingResult from the texts of one setting and their bits per byte [n] (nan ones skipped).

    >>> summarize("greedy", ["a b c"] * 3, torch.tensor([1.0, 1.0, 1.0])).distinct_2
    0.3333333333333333
    """
    values = bits[~torch.isnan(bits)].double()
    if values.numel() == 0:
        raise ValueError(f"No sample of {name!r} could be scored (every text was empty).")
    mean = float(values.mean())
    half = 1.96 * float(values.std()) / math.sqrt(values.numel()) if values.numel() > 1 else 0.0
    q1, median, q3 = (
        float(q) for q in torch.quantile(values, torch.tensor([0.25, 0.5, 0.75], dtype=values.dtype))
    )
    return SettingResult(
        name,
        distinct_n(list(texts), 2),
        mean,
        mean - half,
        mean + half,
        q1,
        median,
        q3,
        values.numel(),
        tuple(texts),
    )


def measure_settings(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt_text: str,
    settings: Mapping[str, DecodingConfig],
    judge: torch.nn.Module,
    judge_tokenizer: PreTrainedTokenizerBase,
    n: int = 20,
    max_new_tokens: int = 24,
    seed: int = 0,
) -> list[SettingResult]:
    """For each setting: n answers to the chat prompt prompt_text (seeds seed..seed+n-1, one batch that
    shares one prefill with the other settings; a greedy setting decodes once), the judge's bits per
    byte of each after prompt_text + a blank line, and their summary. Shows a progress bar.

        >>> results = measure_settings(model, tokenizer, "Write a story.", {"T=1.0": DecodingConfig(temperature=1.0)},
        ...                            judge, judge_tokenizer)
    """
    prompt_ids = chat_prompt(tokenizer, prompt_text)
    batch = torch.tensor([prompt_ids] * n, device=model_device(model))
    prefilled = prefill(model, batch, max_length=len(prompt_ids) + max_new_tokens)
    results = []
    for name, config in tqdm(settings.items(), desc="settings"):
        config = config.replace(max_new_tokens=max_new_tokens)
        if config.do_sample:
            rows = sample_batch(model, tokenizer, prompt_ids, config, n, seed, prefilled)
        else:  # deterministic: every row would be the same
            rows = sample_batch(model, tokenizer, prompt_ids, config, 1) * n
        texts = [tokenizer.decode(row, skip_special_tokens=True) for row in rows]
        bits = judge_bits_per_byte(judge, judge_tokenizer, prompt_text + "\n\n", texts)
        results.append(summarize(name, texts, bits))
    return results


def format_results(results: Sequence[SettingResult]) -> str:
    """A plain-text table: one row per setting, bits per byte as mean [95% interval] and median (IQR)."""
    check_items("results", results, "SettingResult (from measure_settings)", of=SettingResult)
    lines = [
        f"{'setting':<20}{'distinct-2':>11}   {'bits/byte: mean [95% interval]':<32}{'median (IQR)':<20}"
    ]
    for r in results:
        lines.append(
            f"{r.name:<20}{r.distinct_2:>11.2f}   {r.mean:5.2f} [{r.low:.2f}, {r.high:.2f}]{'':<15}"
            f"{r.median:.2f} ({r.q1:.2f}-{r.q3:.2f})"
        )
    return "\n".join(lines)
