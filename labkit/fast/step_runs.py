"""One forward pass, ready to be timed again and again: every call does exactly the same work.

A timing repeats a run and takes the median, so the run must not drift: a decode step that appends to
its KV cache would attend over one more token each call. Each run here prefills a random context once,
then puts the cache back where it was after every call:

    step_run          labkit's forward and KV cache, [rows, tokens] new tokens; the cache is cropped back
    static_step_run   labkit.fast.StaticDecoder's eager decode step, always at the same position (its
                      slot is overwritten, so the static cache never fills)
    compiled_step_run that step compiled by inductor, and the kernel calls of the code it generated

labkit.fast.cost times these runs, whole and on a small probe, to measure the terms of its cost model.

    >>> run = step_run(model, rows=1, context=64, tokens=1)
    >>> median_seconds(run, repeats=5)                     # one decode step after 64 tokens
    0.0141
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._inductor.utils import run_and_get_code

from labkit.core.forward import crop_cache, forward, prefill
from labkit.core.llama import Llama
from labkit.fast.ops import kernel_calls
from labkit.fast.static import StaticDecoder, slots_for


def static_decoder(
    model: Llama, context: int, compile: bool = False
) -> tuple[StaticDecoder, torch.Tensor, torch.Tensor]:
    """A StaticDecoder after a prefilled random context of `context` tokens: (decoder, next token [1, 1],
    its position [1])."""
    decoder = StaticDecoder(
        model, slots_for(context + 2, model.config.max_position_embeddings), compile=compile
    )
    with torch.no_grad():
        token = torch.tensor([[decoder.prefill(torch.randint(model.config.vocab_size, (context,)).tolist())]])
    return decoder, token, torch.tensor([context])


def static_step_run(model: Llama, context: int) -> Callable[[], None]:
    """One eager decode step of labkit.fast.StaticDecoder after a prefilled context, at the same position
    every call (its slot is overwritten), so every call does the same work."""
    decoder, token, position = static_decoder(model, context)

    def run() -> None:
        with torch.no_grad():
            decoder.decode(token, position)

    return run


def compiled_step_run(model: Llama, context: int) -> tuple[Callable[[], None], int]:
    """StaticDecoder's compiled decode step, compiled here (its first call), and the kernel calls of
    inductor's code for it: (run, kernel calls). Every call does the same work, as static_step_run's."""
    decoder, token, position = static_decoder(model, context, compile=True)
    with torch.no_grad():
        _, code = run_and_get_code(decoder.step, token, position)

    def run() -> None:
        with torch.no_grad():
            decoder.step(token, position)

    return run, sum(kernel_calls(text) for text in code)


def step_run(model: Llama, rows: int, context: int, tokens: int, how: str = "loop") -> Callable[[], None]:
    """One forward pass of [rows, tokens] new tokens after a prefilled context of `context` tokens; the
    cache is cropped back after each call, so every call does the same work. how: "loop" (labkit's
    forward and KV cache) or "static" (the StaticDecoder's eager step: rows and tokens 1)."""
    if how == "static":
        return static_step_run(model, context)
    ids = torch.randint(model.config.vocab_size, (rows, context + tokens))
    with torch.no_grad():
        _, cache = prefill(model, ids[:, :context], max_length=context + tokens)

    def run() -> None:
        with torch.no_grad():
            forward(model, ids[:, context:], cache)
        crop_cache(cache, context)

    return run
