"""Comparing engines on the same model: greedy agreement, top-k agreement, and the side-by-side table.

Two engines on the same weights rarely produce bit-identical logits (float32 vs llama.cpp's 4-bit
matmuls with 8-bit activations, different summation orders), so text can part where two tokens are
nearly tied. Two measures say how far they agree:

- greedy agreement: how many of the first n greedy tokens match before the texts part;
- top-k agreement: the share of the reference's k most likely next tokens that the other engine
  also ranks in its top k.

    >>> greedy_agreement([5, 6, 7, 8], [5, 6, 9, 8], n=4)
    2
    >>> topk_agreement([3, 1, 4, 5, 9], [1, 3, 4, 2, 6])
    0.6
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from labkit.core.arguments import check_int, check_text
from labkit.core.doors import check_items
from labkit.table import Column, format_table

GREEDY_TOKENS = 32  # the first tokens of each greedy answer compared
TOP_K = 5


def greedy_agreement(reference: Sequence[int], other: Sequence[int], n: int = GREEDY_TOKENS) -> int:
    """Tokens the two greedy answers share from the start, counting at most `n`.

    After the first difference the two continue from different texts, so later matches say nothing.
    """
    check_items("reference", reference, "token ids (int)", of=int)
    check_items("other", other, "token ids (int)", of=int)
    check_int("n", n, minimum=0)
    shared = 0
    for a, b in zip(reference[:n], other[:n]):
        if a != b:
            break
        shared += 1
    return shared


def topk_agreement(reference_top: Sequence[int], other_top: Sequence[int]) -> float:
    """|reference top-k ∩ other top-k| / k for two lists of token ids (k = len(reference_top))."""
    if not reference_top:
        raise ValueError("reference_top is empty: pass the reference's k most likely token ids.")
    return len(set(reference_top) & set(other_top)) / len(reference_top)


@dataclass
class EngineRow:
    """One engine in the side-by-side table; None where a figure does not apply (with the reason in notes)."""

    engine: str  # e.g. "llama.cpp server"
    startup_s: float  # load (in-process) or launch -> ready (server)
    ttft_s: float  # median time to the first answer token, one request, streamed
    tokens_per_s: float  # batch 1: median decode rate of one request
    concurrent_tokens_per_s: float | None  # all output tokens / wall time, 8 requests at once
    rss_bytes: int | None  # resident memory of the process(es) holding the model
    greedy_tokens: list[list[int]] = field(default_factory=list)  # per prompt, the first greedy tokens
    top_tokens: list[int] | None = None  # the 5 most likely first answer tokens (chat prompt), if exposed
    notes: str = ""
    policy: str = ""  # OMP_WAIT_POLICY of the process(es) that ran it ("" when not recorded)


def agreement_cells(row: EngineRow, reference: EngineRow) -> tuple[str, str]:
    """('31/32 + 32/32 ...', '100 %') against the reference row."""
    shared = [greedy_agreement(ref, mine) for ref, mine in zip(reference.greedy_tokens, row.greedy_tokens)]
    greedy = " ".join(
        f"{s}/{min(len(ref), GREEDY_TOKENS)}" for s, ref in zip(shared, reference.greedy_tokens)
    )
    if row.top_tokens is None or reference.top_tokens is None:
        return greedy or "-", "-"
    return greedy or "-", f"{topk_agreement(reference.top_tokens, row.top_tokens):.0%}"


def number(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def side_by_side(rows: Sequence[EngineRow], reference: str = "transformers") -> str:
    """The table notebook 12 prints: one line per engine, agreement measured against `reference`, and the
    OpenMP wait policy each row ran under when any row recorded one."""
    check_items("rows", rows, "EngineRow (from labkit.engines.measure.measure)", of=EngineRow)
    check_text("reference", reference, example="'transformers'")
    base = next(row for row in rows if row.engine == reference)
    policies = any(row.policy for row in rows)
    columns = (
        [Column("engine", 22, align="<")]
        + [Column("policy", 9, align="<")] * policies
        + [
            Column("start s", 8),
            Column("TTFT ms", 9),
            Column("tok/s b=1", 10),
            Column("tok/s 8 req", 12),
            Column("RSS MB", 8),
            Column("  greedy agreement (per prompt)", 32, align="<"),
            Column("top-5", 6),
        ]
    )
    cells = []
    for row in rows:
        greedy, top = agreement_cells(row, base)
        rss = None if row.rss_bytes is None else row.rss_bytes / 1e6
        cells.append(
            [row.engine]
            + [row.policy or "-"] * policies
            + [
                number(row.startup_s, ".1f"),
                number(row.ttft_s * 1e3, ".0f"),
                number(row.tokens_per_s, ".1f"),
                number(row.concurrent_tokens_per_s, ".1f"),
                number(rss, ".0f"),
                f"  {greedy}",
                top,
            ]
        )
    header, *lines = format_table(columns, cells).split("\n")
    return "\n".join([header, "-" * len(header)] + lines)
