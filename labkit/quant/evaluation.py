"""What a quantization scheme costs and buys: bytes, perplexity, greedy agreement, decode speed.

Every variant of the model (float32, bfloat16, labkit's int8 / int4 / NF4, bitsandbytes' int8 / NF4)
is measured in one run on the same data (data/eval/, written for this project):

    model bytes       the stored weights: codes, scales and the float parts (embeddings, norms)
    perplexity        exp(mean NLL) on data/eval/eval_text.txt, in 512-token windows
    greedy agreement  how much of the float32 model's greedy continuation of each prompt in
                      data/eval/prompts.json the variant reproduces before its first different token
    tokens/s          batch-1 greedy decoding with labkit's loop, the variants timed in turns
                      (median of `repeats` rounds), so that a change of the machine's load hits them all

The text and prompts are read by labkit.models.eval_data (notebook 12's quality measures read them too).

    >>> results = evaluate(["fp32", "int8", "nf4"], max_tokens=1024)
    >>> print(results_table(results))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from labkit.core.doors import check_items, check_model
from labkit.core.text import encode_prompt
from labkit.decoding.generate import generate_ids
from labkit.decoding.scoring import perplexity
from labkit.models.eval_data import eval_ids, eval_prompts
from labkit.models.loading import load_model
from labkit.quant.bnb import BitsAndBytesUnavailable, load_bitsandbytes_model
from labkit.quant.linear import quantize_model
from labkit.table import Column, format_row
from labkit.timing import check_repeats, interleaved_tokens_per_second

MODEL = "smollm2-135m"
DECODE_PROMPT = "The history of the Roman Empire begins with"  # plain text: rarely ends early


def model_nbytes(model: torch.nn.Module) -> int:
    """Bytes of everything a model stores: parameters and persistent buffers, each shared tensor once,
    plus the scales bitsandbytes keeps beside its quantized parameters."""
    check_model("model", model)
    seen, total = set(), 0
    for module in model.modules():
        skip = getattr(module, "_non_persistent_buffers_set", set())
        tensors = list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False))
        for name, tensor in tensors:
            if tensor is None or name in skip or id(tensor) in seen:
                continue
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
            extras = [
                getattr(getattr(tensor, "quant_state", None), "absmax", None),
                getattr(tensor, "SCB", None),
            ]
            for extra in extras:  # bitsandbytes: 4-bit block absmax, int8 row scales
                if isinstance(extra, torch.Tensor) and id(extra) not in seen:
                    seen.add(id(extra))
                    total += extra.numel() * extra.element_size()
    return total


def greedy_runs(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    n_tokens: int = 24,
) -> list[list[int]]:
    """The greedy continuation (up to n_tokens, or EOS) of each prompt."""
    return [generate_ids(model, tokenizer, list(prompt), max_new_tokens=n_tokens) for prompt in prompts]


def greedy_agreement(runs: Sequence[Sequence[int]], reference_runs: Sequence[Sequence[int]]) -> float:
    """Mean over prompts of the share of the reference continuation reproduced before the first
    different token (1.0: identical text; 0.0: the very first token differs)."""
    if len(runs) != len(reference_runs) or not runs:
        raise ValueError("runs and reference_runs need one continuation per prompt, for the same prompts.")
    shares = []
    for run, reference in zip(runs, reference_runs):
        same = next(
            (i for i, (a, b) in enumerate(zip(run, reference)) if a != b), min(len(run), len(reference))
        )
        shares.append(1.0 if list(run) == list(reference) else same / max(len(reference), 1))
    return sum(shares) / len(shares)


def decode_tokens_per_second(
    models: dict[str, torch.nn.Module],
    tokenizer: PreTrainedTokenizerBase,
    new_tokens: int = 64,
    repeats: int = 3,
) -> dict[str, float]:
    """Median tokens/s of each model's batch-1 greedy decoding of DECODE_PROMPT, the models taking turns:
    one untimed warm-up round, then `repeats` rounds that each decode once with every model. Timed one
    after another, a model would carry whatever load the machine had while its turn lasted.

        >>> decode_tokens_per_second({"fp32": model, "int8": int8_model}, tokenizer, new_tokens=16)
        {'fp32': 22.9, 'int8': 29.1}
    """
    prompt_ids = encode_prompt(tokenizer, DECODE_PROMPT)
    runs = [
        lambda m=model: len(generate_ids(m, tokenizer, prompt_ids, max_new_tokens=new_tokens))
        for model in models.values()
    ]
    rates = interleaved_tokens_per_second(
        runs, repeats, progress=lambda rounds: tqdm(rounds, desc="speed rounds")
    )
    return dict(zip(models, rates))


def _labkit_variant(scheme: str | None, dtype: str = "float32", **options) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        model, _ = load_model(MODEL, dtype=dtype)
        return quantize_model(model, scheme, **options) if scheme else model

    return build


def _bnb_variant(mode: str) -> Callable[[], torch.nn.Module]:
    return lambda: load_bitsandbytes_model(MODEL, mode)[0]


# name -> (what it is, how to build it). Everything keeps the embeddings in float32; "+head" variants
# also quantize the output head (SmolLM2 ties it to the embeddings, so it gets its own int8 copy).
VARIANTS: dict[str, tuple[str, Callable[[], torch.nn.Module]]] = {
    "fp32": ("float32, the reference", _labkit_variant(None)),
    "bf16": ("bfloat16 weights and activations", _labkit_variant(None, dtype="bfloat16")),
    "int8": (
        "labkit int8 per channel, fused kernel; head in fp32",
        _labkit_variant("int8", skip=("lm_head",)),
    ),
    "int8+head": ("labkit int8 per channel, head too", _labkit_variant("int8", skip=())),
    "int4 g64": (
        "labkit int4 symmetric, groups of 64",
        _labkit_variant("int4", group_size=64, skip=("lm_head",)),
    ),
    "int4 g32": (
        "labkit int4 symmetric, groups of 32",
        _labkit_variant("int4", group_size=32, skip=("lm_head",)),
    ),
    "int4a g32": (
        "labkit int4 asymmetric, groups of 32 (GGUF Q4_1's grid)",
        _labkit_variant("int4-asym", group_size=32, skip=("lm_head",)),
    ),
    "nf4": ("labkit NF4, blocks of 64", _labkit_variant("nf4", group_size=64, skip=("lm_head",))),
    "bnb int8": ("bitsandbytes LLM.int8()", _bnb_variant("int8")),
    "bnb nf4": ("bitsandbytes NF4, blocks of 64", _bnb_variant("nf4")),
}


@dataclass(frozen=True)
class Result:
    """One row of the results table (NaN where a variant could not be measured)."""

    name: str  # a key of VARIANTS
    description: str  # what the variant is
    nbytes: float  # bytes of stored weights
    perplexity: float  # on the evaluation text
    agreement: float  # greedy agreement with fp32, 0..1
    tokens_per_second: float  # batch-1 greedy decoding
    note: str = ""  # why a variant is missing, if it is


def evaluate(
    names: Sequence[str] = tuple(VARIANTS),
    max_tokens: int | None = None,
    window: int = 512,
    agreement_tokens: int = 24,
    agreement_prompts: int | None = None,
    decode_tokens: int = 64,
    repeats: int = 3,
    measure_speed: bool = True,
) -> list[Result]:
    """Measure each named variant on the same data, in one run. fp32 is always measured (first),
    since agreement is relative to it.

    max_tokens: score only the first max_tokens tokens of the evaluation text (None: all of it).
    agreement_tokens / agreement_prompts: greedy tokens per prompt, and how many of the 8 prompts.
    measure_speed: time decoding, every variant in turns once all are built (so all are held in memory
    together: about 1.6 GB for notebook 08's seven); False skips it (NaN tokens/s).
    """
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise ValueError(f"Unknown variants {unknown}. Choose from: {', '.join(VARIANTS)}.")
    check_repeats(repeats)
    names = ["fp32"] + [name for name in names if name != "fp32"]
    _, tokenizer = load_model(MODEL)
    input_ids, prompts = eval_ids(tokenizer, max_tokens), eval_prompts(tokenizer)[:agreement_prompts]
    results, reference, models = [], None, {}
    for name in tqdm(names, desc="variants"):
        description, build = VARIANTS[name]
        try:
            model = build()
        except BitsAndBytesUnavailable as error:
            results.append(Result(name, description, math.nan, math.nan, math.nan, math.nan, note=str(error)))
            continue
        runs = greedy_runs(model, tokenizer, prompts, agreement_tokens)
        reference = reference or runs
        results.append(
            Result(
                name,
                description,
                model_nbytes(model),
                perplexity(model, input_ids, window),
                greedy_agreement(runs, reference),
                math.nan,
            )
        )
        if measure_speed:
            models[name] = model
        del model
    speeds = decode_tokens_per_second(models, tokenizer, decode_tokens, repeats) if models else {}
    return [replace(r, tokens_per_second=speeds[r.name]) if r.name in speeds else r for r in results]


# results_table's columns. A ratio cell is written with its "x" ("0.41x"); the agreement cell keeps a space
# after its value, so the speed columns start one character right of it.
RESULT_COLUMNS = [
    Column("variant", 11, align="<"),
    Column("MB", 8, ".1f"),
    Column("x fp32", 8),
    Column("perplexity", 12, ".3f"),
    Column("Δ ppl", 8, "+.1%"),
    Column("agreement", 11),
    Column("tok/s", 8, ".1f"),
    Column("x fp32", 8),
]


def _result_row(result: Result, base: Result) -> str:
    """One variant's line; its speed columns are left off when it was not timed, and a variant that could not
    be built says why instead."""
    if result.note:
        return f"{result.name:<11}  unavailable: {result.note.split('.')[0]}"
    cells = [
        result.name,
        result.nbytes / 1e6,
        f"{result.nbytes / base.nbytes:.2f}x",
        result.perplexity,
        result.perplexity / base.perplexity - 1,
        f"{result.agreement:.0%} ",
    ]
    if not math.isnan(result.tokens_per_second):
        cells += [result.tokens_per_second, f"{result.tokens_per_second / base.tokens_per_second:.2f}x"]
    return format_row(RESULT_COLUMNS[: len(cells)], cells)


def results_table(results: Sequence[Result]) -> str:
    """A text table of results, with each variant's size and speed relative to fp32.

    >>> fp32, int8 = Result("fp32", "", 538e6, 10.0, 1.0, 20.0), Result("int8", "", 219e6, 10.05, 0.9, 40.0)
    >>> print(results_table([fp32, int8]))
    variant          MB  x fp32  perplexity   Δ ppl  agreement   tok/s  x fp32
    fp32          538.0   1.00x      10.000   +0.0%      100%     20.0   1.00x
    int8          219.0   0.41x      10.050   +0.5%       90%     40.0   2.00x
    """
    check_items(
        "results", results, "Result (labkit.quant.evaluation.evaluate)", has=("name", "nbytes", "perplexity")
    )
    base = next((r for r in results if r.name == "fp32"), results[0])
    titles = format_row(RESULT_COLUMNS, [column.title for column in RESULT_COLUMNS])
    return "\n".join([titles] + [_result_row(r, base) for r in results])
