"""What one step of the serving engine gives back: an `Output` per token it produced, and its `StepMetrics`.

>>> for out in engine.step():
...     print(out.request_id, repr(out.text), out.finish_reason)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from labkit.serving.request import TokenLogprob


class Output(NamedTuple):
    """One token a step produced for one request (one sample of it).

    >>> request_id, token_id, text, finish_reason, logprob = engine.step()[0]
    """

    request_id: int
    token_id: int
    text: str  # the text this token adds ('' while a character is incomplete)
    finish_reason: str | None  # "eos", "length" or "stop" on the request's last token, else None
    # its log-probability and alternatives, when the request asked for them
    logprob: TokenLogprob | None = None


@dataclass(frozen=True)
class StepMetrics:
    """What one engine step did."""

    kind: str  # "prefill", "decode" or "mixed" (decodes and prompt chunks in one pass: chunked prefill)
    batch_size: int  # sequences in the forward pass
    n_tokens: int  # tokens fed (padding not counted)
    blocks_used: int  # KV blocks in use after the step (a Gemma3's: its global layers' pool)
    preempted: int  # sequences sent back to the queue by this step's schedule
    duration_s: float  # schedule + run + postprocess, on the engine's clock
    window_blocks_used: int | None = None  # a Gemma3's local layers' blocks in use after it (else None)
    drafted: int = 0  # draft tokens fed (speculation; labkit.serving.speculation)
    accepted: int = 0  # ... and kept
