"""The timings behind a step's terms (labkit.fast.cost): every linear layer timed alone (the matmul term),
and a shrunk copy of the model timed whole (the time per op, with its spread).

The **probe** is the same model code with the same labkit.fast steps, shrunk to widths of 64 and a
256-token vocabulary, so that its bytes and FLOPs are negligible and its step time is all fixed costs.
Less its own linear layers timed alone (their fixed cost per call is in the matmul term already) and
divided by its op count, each timed repeat of its step gives what one op costs on this machine, in this
code path; the reading is their median, with their **spread** (labkit.fast.regime.relative_spread: the
interquartile range over the median), as the machine probes keep theirs.

    >>> per_op_probe(model.config, ("fuse",), rows=1, context=64, tokens=1)
    Probed(value=6.0e-06, spread=0.05)                # 6.0 us per op, its repeats within ±5 %
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import nn

from labkit.core.llama import Llama, LlamaConfig
from labkit.fast.ops import count_ops
from labkit.fast.optimize import optimize
from labkit.fast.q4_linear import KernelLinear
from labkit.fast.regime import Probed
from labkit.fast.step_runs import compiled_step_run, step_run
from labkit.quant.linear import QuantLinear
from labkit.timing import median_seconds, repeat_seconds

PROBE_WIDTHS = {"hidden_size": 64, "intermediate_size": 128, "head_dim": 16, "vocab_size": 256}


def linear_layers(model: nn.Module) -> list[nn.Module]:
    """Every linear layer of the model (float, QuantLinear or on labkit's kernel), the output head included, in order."""
    return [m for m in model.modules() if isinstance(m, (nn.Linear, QuantLinear, KernelLinear))]


def matmul_seconds(model: nn.Module, rows: int, repeats: int = 5) -> float:
    """Median seconds of every linear layer of `model` once, back to back, on inputs of `rows` rows."""
    layers = linear_layers(model)
    dtype = model.embed_tokens.weight.dtype
    inputs = [torch.randn(rows, layer.in_features, dtype=dtype) for layer in layers]

    def run() -> None:
        for layer, x in zip(layers, inputs):
            layer(x)

    with torch.no_grad():
        return median_seconds(run, repeats)


def probe_model(config: LlamaConfig, steps: Sequence[str]) -> Llama:
    """The probe: the same architecture and steps at negligible widths (random weights)."""
    small = replace(config, **PROBE_WIDTHS, n_heads=4, n_kv_heads=2)
    return optimize(Llama(small).eval(), steps)


def per_op_probe(
    config: LlamaConfig,
    steps: Sequence[str],
    rows: int,
    context: int,
    tokens: int,
    repeats: int = 5,
    how: str = "loop",
) -> Probed:
    """Seconds per op of the probe's step outside its matmul kernels: each timed step less its linear
    layers timed alone (their median), over its op count; the median of those and their spread. A
    kernel's fixed cost per call (a launch, a second thread woken) is in the matmul and wake-up terms
    already, timed on the real widths; left in here, it would be counted twice."""
    probe = probe_model(config, steps)
    run = step_run(probe, rows, context, tokens, how)
    matmuls, ops = matmul_seconds(probe, rows * tokens, repeats), count_ops(run)
    return Probed.of([max(step - matmuls, 0.0) / ops for step in repeat_seconds(run, repeats)])


def compiled_probe_terms(
    model: Llama, steps: Sequence[str], context: int, repeats: int
) -> tuple[Probed, float]:
    """(seconds per kernel call, matmul seconds) of the compiled step: the compiled probe's step over its
    kernel calls (the median of its repeats, with their spread), and what the real widths add to the
    probe's linear layers (see labkit.fast.cost's docstring)."""
    probe = probe_model(model.config, steps)
    probe_run, probe_calls = compiled_step_run(probe, context)
    extra = matmul_seconds(model, 1, repeats) - matmul_seconds(probe, 1, repeats)
    per_call = Probed.of([step / probe_calls for step in repeat_seconds(probe_run, repeats)])
    return per_call, max(extra, 0.0)
