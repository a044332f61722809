"""One entry point for labkit's fast batch-1 decode path: named steps applied to a model, in order.

    fuse   one matmul for q/k/v and one for gate/up per block (the same numbers, fewer calls)
    onednn float32 weights packed once for oneDNN's matmul, as vLLM's CPU build runs them
    int8   weight-only int8 per output channel, every linear layer including the output head
    int4   weight-only int4, groups of 32 with a scale and a minimum (GGUF Q4_1's grid), head in int8
    q4_1   the same grid on labkit's own kernel: int8 activations, integer dot products (llama.cpp's way),
           and the head in Q8_0 (int8 groups of 32) on the same kernel, as the GGUF file has it
    bf16   everything not quantized in bfloat16: embeddings, norms, activations, KV cache

Each step changes the model in place and is checked by tests/fast/: `fuse` against the
unfused model (float32 tolerance), the quantized steps and `bf16` by perplexity on data/eval.

    >>> model, tokenizer = labkit.load_model("smollm2-135m", impl="labkit")
    >>> from labkit.fast import optimize
    >>> optimize(model, steps=("fuse", "int8"))
    >>> labkit.generate_text(model, tokenizer, "The capital of France is", max_new_tokens=8)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from torch import nn

from labkit.core.gemma3 import Gemma3
from labkit.core.llama import Llama, check_llama
from labkit.fast.fuse import fuse_projections
from labkit.fast.onednn_linear import pack_for_onednn
from labkit.fast.precision import quantize_weights, to_bfloat16

# name -> (what it does, the function applied to the model). The order here is the order allowed.
STEPS: dict[str, tuple[str, Callable[[Llama], Llama]]] = {
    "fuse": ("fused QKV and gate/up projections", fuse_projections),
    "onednn": ("float32 weights packed for oneDNN's matmul", pack_for_onednn),
    "int8": ("int8 weight-only, head included", partial(quantize_weights, scheme="int8")),
    "int4": ("int4 groups of 32 weight-only, head int8", partial(quantize_weights, scheme="int4")),
    "q4_1": (
        "int4 groups of 32 x int8 activations on labkit's kernel, head Q8_0",
        partial(quantize_weights, scheme="q4_1"),
    ),
    "bf16": ("bfloat16 for everything not quantized", to_bfloat16),
}
QUANTIZED = ("int8", "int4", "q4_1")
WEIGHT_FORMATS = ("onednn", *QUANTIZED)  # at most one of these; onednn's float32 packing also excludes bf16
APPLIED = "fast_steps"  # the model's attribute that records the steps optimize applied to it, in order


def check_steps(steps: Sequence[str]) -> tuple[str, ...]:
    """Return steps as a tuple, or raise a ValueError that says what is allowed.

    Steps must be known, each at most once, at most one weight format (onednn, int8, int4, q4_1; onednn
    not with bf16), in the order of STEPS (fusing needs plain float layers, so it comes before the rest).

        >>> check_steps(["fuse", "int4", "bf16"])
        ('fuse', 'int4', 'bf16')
    """
    allowed = ", ".join(STEPS)
    if isinstance(steps, str) or not isinstance(steps, Sequence):
        raise ValueError(
            f"steps must be a tuple of step names, e.g. ('fuse', 'int8'), got {steps!r}. "
            f"Allowed, in this order: {allowed}."
        )
    unknown = [step for step in steps if step not in STEPS]
    if unknown:
        raise ValueError(f"Unknown steps {unknown}. Allowed, in this order: {allowed}.")
    if len(set(steps)) < len(steps):
        raise ValueError(f"Each step may appear once, got {tuple(steps)}.")
    if sum(step in WEIGHT_FORMATS for step in steps) > 1:
        raise ValueError(f"Choose at most one of {', '.join(WEIGHT_FORMATS)}.")
    if "onednn" in steps and "bf16" in steps:
        raise ValueError(
            "onednn packs float32 weights and takes float32 activations: it cannot run with bf16."
        )
    order = list(STEPS)
    if [order.index(step) for step in steps] != sorted(order.index(step) for step in steps):
        raise ValueError(f"Steps must come in this order: {allowed}; got {tuple(steps)}.")
    return tuple(steps)


def optimize(model: nn.Module, steps: Sequence[str] = ("fuse", "int8")) -> Llama | Gemma3:
    """Apply `steps` (names in STEPS) to labkit's Llama, in order and in place; returns the model. labkit's
    Gemma3 takes every step but "fuse" (its head, tied to the embedding, is quantized as its own copy).

    A transformers model is refused: load labkit's with load_model(..., impl="labkit") or
    labkit.Llama.from_hf(model) (the fused and quantized layers replace labkit's own modules). A second call
    on the same model may only add steps that could have followed in the first call's tuple (("fuse",), then
    ("int8",)); the model records the steps applied to it (`model.fast_steps`).

        >>> model = optimize(labkit.tiny_model(impl="labkit"), steps=("fuse", "int4", "bf16"))
        >>> optimize(model, ("int8",))
        ValueError: steps ('int8',) cannot follow the steps this model has had applied already ('fuse', ...
    """
    steps = check_model_steps(model, check_steps(steps))
    applied = check_more_steps(getattr(model, APPLIED, ()), steps)
    for step in steps:
        model = STEPS[step][1](model)
        applied += (step,)
        setattr(model, APPLIED, applied)
    return model


def check_model_steps(model: nn.Module, steps: tuple[str, ...]) -> tuple[str, ...]:
    """steps, if `model` is labkit's Llama, or its Gemma3 without "fuse" (Gemma's attention normalises q and k
    after their projections, and fuse_projections builds a Llama's); else an error saying what runs.

        >>> check_model_steps(gemma3, ("fuse", "q4_1"))
        ValueError: steps ('fuse', 'q4_1'): "fuse" runs on labkit's Llama only; a Gemma3 takes int8, int4, ...
    """
    if not isinstance(model, Gemma3):
        check_llama(model, "labkit.fast.optimize")
    elif "fuse" in steps:
        others = ", ".join(step for step in STEPS if step != "fuse")
        raise ValueError(
            f'steps {steps}: "fuse" runs on labkit\'s Llama only; a Gemma3 takes {others} (e.g. ("q4_1",)).'
        )
    return steps


def check_more_steps(applied: tuple[str, ...], steps: tuple[str, ...]) -> tuple[str, ...]:
    """applied, if `steps` may follow the steps a model has had applied already (as if both were one tuple);
    else a ValueError naming both: a step changes the model in place, and no step is undone.

        >>> check_more_steps(("int8",), ("int4",))
        ValueError: steps ('int4',) cannot follow the steps this model has had applied already ('int8',): ...
    """
    if not applied or not steps:
        return applied
    try:
        check_steps(applied + steps)
    except ValueError as refused:
        raise ValueError(
            f"steps {steps} cannot follow the steps this model has had applied already {applied}: {refused} "
            "optimize changes a model in place and undoes no step: start from a fresh model "
            "(labkit.load_model(name, impl='labkit')) to apply another set."
        ) from None
    return applied
