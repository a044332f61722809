"""Quantized SmolLM2: int8 decode speed vs fp32, 4-bit perplexity vs fp32, labkit NF4 vs bitsandbytes.

Every variant of labkit.evaluation.VARIANTS is measured in this one run (bytes, perplexity on
data/eval/eval_text.txt, greedy agreement with fp32, decode tokens/s), then the comparisons the
quantization lab aims for are printed as JSON lines:

    quant_int8_decode        tokens/s, int8 weight-only vs fp32       aim: at least 2x
    quant_int8_perplexity    perplexity, int8 vs fp32                 aim: within 1%
    quant_nf4_perplexity     perplexity, labkit NF4 vs fp32           aim: within 10%
    quant_int4_perplexity    perplexity, labkit int4 g32 vs fp32      aim: within 10%
    quant_int4_asym_perplexity perplexity, int4 asymmetric g32 (Q4_1's grid) vs fp32
    quant_int4_decode        tokens/s, int4 g32 (fused kernel) vs fp32
    quant_nf4_vs_bitsandbytes perplexity, labkit NF4 vs bitsandbytes NF4 (the same codes: ratio 1)
"""

from __future__ import annotations

from labkit.benchmarks.comparison import comparison
from labkit.quant.evaluation import VARIANTS, Result, evaluate, results_table
from labkit.this_machine import machine_name

QUICK_VARIANTS = ["fp32", "int8", "int4 g32", "nf4"]
# (bench name, metric, labkit variant, peer variant, peer name, aim as text)
COMPARISONS = [
    ("quant_int8_decode", "tokens_per_second", "int8", "fp32", "fp32 decode, same loop", "at least 2x"),
    (
        "quant_int8_head_decode",
        "tokens_per_second",
        "int8+head",
        "fp32",
        "fp32 decode, same loop",
        "at least 2x",
    ),
    ("quant_int8_perplexity", "perplexity", "int8", "fp32", "fp32", "within 1%"),
    ("quant_nf4_perplexity", "perplexity", "nf4", "fp32", "fp32", "within 10%"),
    ("quant_int4_perplexity", "perplexity", "int4 g32", "fp32", "fp32", "within 10%"),
    ("quant_int4_asym_perplexity", "perplexity", "int4a g32", "fp32", "fp32", "within 10%"),
    (
        "quant_int4_decode",
        "tokens_per_second",
        "int4 g32",
        "fp32",
        "fp32 decode, same loop",
        "faster than fp32",
    ),
    ("quant_nf4_vs_bitsandbytes", "perplexity", "nf4", "bnb nf4", "bitsandbytes NF4", "ratio 1"),
]


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    names = QUICK_VARIANTS if quick else list(VARIANTS)
    # quick: the fewest tokens and prompts that still fill every column of every variant's row
    options = (
        dict(max_tokens=64, agreement_tokens=4, agreement_prompts=2, decode_tokens=4)
        if quick
        else dict(max_tokens=None, agreement_tokens=24, decode_tokens=128)
    )
    results = evaluate(names, repeats=repeats, **options)
    print(
        f"quant: SmolLM2-135M, batch 1, greedy; perplexity on {'64' if quick else 'all'} tokens of "
        f"data/eval/eval_text.txt; tokens/s median of {repeats}"
    )
    print(f"machine: {machine_name()}")
    print(results_table(results))
    by_name: dict[str, Result] = {r.name: r for r in results if not r.note}
    records = []
    for bench, metric, mine, peer, peer_name, aim in COMPARISONS:
        if mine not in by_name or peer not in by_name:
            continue
        value = getattr(by_name[mine], metric)
        peer_value = getattr(by_name[peer], metric)
        records.append(comparison(bench, metric, value, peer_value, peer_name))
        print(f"{bench:<27}{value / peer_value:>7.3f}x   aim: {aim}")
    return records
