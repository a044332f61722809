"""What `python -m labkit.bench fast` prints from its measured rows: the waterfall table, the JSON
comparisons, and when each compiled row pays back its compile time.

The table reads a row left to right as a story: its settings (wait policy, threads), its speed, how many
times labkit float32 that is, the weights it reads per token and the share of the read bandwidth that
makes (bytes per token x tokens/s / bandwidth), how it compares with llama.cpp at its best, and, where
the cost model predicted the row's decode step, that prediction beside the step timed alone and the
regime its largest term names (labkit.fast.regime.regime_of: "borderline" within the probes' spread).

A compiled row pays for its compile time once it has saved as many seconds as the compile took: after
compile seconds / (1 / eager tok/s - 1 / compiled tok/s) tokens (labkit.fast.static.break_even_tokens),
weighed against the eager static row with the same steps.

    >>> print(table(rows, measure_machine()))
    path                                        policy thr  tok/s  x fp32 MB/tok of bw x llama.cpp   pred   step  regime
    labkit Llama, float32                      PASSIVE   2   20.0   1.00x  538.0   54%       0.18x   28.1   30.0  overhead-bound
"""

from __future__ import annotations

import math

from labkit.benchmarks.comparison import comparison
from labkit.benchmarks.fast_rows import FP32, LLAMA_CPP, ROWS, Row, eager_counterpart, fastest_labkit
from labkit.core.doors import check_items, check_record, check_table
from labkit.fast.machine import Machine
from labkit.fast.roofline import bandwidth_utilisation
from labkit.fast.static import break_even_tokens, inductor_cache
from labkit.table import Column, format_table

COLUMNS = [
    Column("path", 42, align="<"),
    Column("policy", 8),
    Column("thr", 4),
    Column("tok/s", 7, ".1f"),
    Column("x fp32", 8),  # "2.75x": written by the row, the "x" included
    Column("MB/tok", 7, ".1f"),
    Column("of bw", 6, ".0%"),
    Column("x llama.cpp", 12),  # "0.50x", or "-" without llama.cpp
    Column("pred", 7, ".1f"),  # ms of one decode step, as the cost model predicts it
    Column("step", 7, ".1f"),  # ... and as timed alone
    Column("", 2),  # the two spaces before the regime
    Column("regime", 0, align="<"),
]


def cost_cells(row: Row, machine: Machine) -> list[object]:
    """The cost model's cells of a row: predicted and measured ms of one step, and its regime, named by
    StepCosts.regime_reading like every regime in the course ("-" each when the row was not predicted)."""
    if row.costs is None:
        return ["-", "-", "", "-"]
    return [
        row.costs.predicted_seconds(machine) * 1e3,
        row.costs.measured_seconds * 1e3,
        "",
        row.costs.regime_reading(machine).name,  # "borderline a / b" within the machine probes' spread
    ]


def row_cells(row: Row, fp32: float, peer: float | None, machine: Machine) -> list[object]:
    """One row's cells of COLUMNS: its settings, speed, ratios to labkit float32 and to llama.cpp (peer,
    None when llama.cpp did not run), bytes per token and bandwidth use, then its cost cells."""
    use = bandwidth_utilisation(row.bytes_per_token, row.tokens_per_second, machine.read_bandwidth)
    versus = f"{row.tokens_per_second / peer:.2f}x" if peer else "-"
    return [
        row.label,
        row.policy or "-",
        row.threads,
        row.tokens_per_second,
        f"{row.tokens_per_second / fp32:.2f}x",
        row.bytes_per_token / 1e6,
        use,
        versus,
        *cost_cells(row, machine),
    ]


def table(rows: list[Row], machine: Machine) -> str:
    """The waterfall as text: each row's settings, speed, bandwidth use, ratios against labkit float32 and
    llama.cpp at its best, and the cost model's predicted and measured step (ms) where it has one."""
    check_items("rows", rows, "Row (from measure_rows)", of=Row)
    check_record("machine", machine, "a Machine (labkit.fast.machine.measure_machine())", of=Machine)
    fp32 = next(r for r in rows if r.label == FP32).tokens_per_second
    peer = next((r.tokens_per_second for r in rows if r.label == LLAMA_CPP), None)
    return format_table(COLUMNS, [row_cells(r, fp32, peer, machine) for r in rows])


def records(rows: list[Row], machine: Machine) -> list[dict]:
    """The JSON comparisons: each step against labkit float32, the fastest path against its peers (each
    at its best settings) and against the read bandwidth."""
    by_label = {r.label: r for r in rows}
    fp32 = by_label[FP32].tokens_per_second
    fastest = fastest_labkit(rows)
    out = [
        comparison(
            "fast_fp32_vs_transformers",
            "tokens_per_second",
            fp32,
            by_label["transformers generate, float32"].tokens_per_second,
            "transformers generate fp32",
        )
    ]
    for label, steps, how in ROWS[2:]:
        if label in by_label:
            name = "_".join(steps) + ("" if how == "loop" else "_" + how)
            out.append(
                comparison(
                    "fast_" + name,
                    "tokens_per_second",
                    by_label[label].tokens_per_second,
                    fp32,
                    "labkit Llama fp32",
                )
            )
    out.append(
        comparison(
            "fast_bandwidth",
            "bytes_per_second",
            fastest.bytes_per_token * fastest.tokens_per_second,
            machine.read_bandwidth,
            "measured read bandwidth",
        )
    )
    if LLAMA_CPP in by_label:
        cpp = by_label[LLAMA_CPP]
        out.append(
            comparison(
                "fast_vs_llama_cpp",
                "tokens_per_second",
                fastest.tokens_per_second,
                cpp.tokens_per_second,
                f"{LLAMA_CPP}, {cpp.policy} {cpp.threads} threads",
            )
        )
    return out


def payback_tokens(rows: list[Row], compile_seconds: dict[str, float]) -> dict[str, float]:
    """{compiled row: the tokens after which its compile time pays for itself against its eager counterpart}
    (math.inf when it is no faster, or when its eager row was not measured).

        >>> payback_tokens(rows, compile_seconds)["+ torch.compile, static shapes"]
    """
    check_items("rows", rows, "Row (from measure_rows)", of=Row)
    check_table(
        "compile_seconds", compile_seconds, "compile seconds (a number) by row label", of=(int, float)
    )
    rates, paybacks = {r.label: r.tokens_per_second for r in rows}, {}
    for label, seconds in compile_seconds.items():
        eager = eager_counterpart(label)
        paybacks[label] = (
            break_even_tokens(seconds, rates[eager], rates[label]) if eager in rates else math.inf
        )
    return paybacks


def compile_report(rows: list[Row], compile_seconds: dict[str, float]) -> str:
    """The compile time of each compiled row, and after how many tokens it pays for itself."""
    paybacks = payback_tokens(rows, compile_seconds)
    lines = []
    for label, seconds in compile_seconds.items():
        eager, tokens = eager_counterpart(label), paybacks[label]
        pays = (
            f"pays for itself after {tokens:,.0f} tokens"
            if tokens < math.inf
            else "never pays for itself here"
        )
        lines.append(
            f"compile: {label.lstrip('+ ')}: {seconds:.1f} s on its first call (inductor's cache: "
            f"{inductor_cache()}); against '{eager}' it {pays}"
        )
    return "\n".join(lines)
