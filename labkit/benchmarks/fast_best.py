"""Each row of `python -m labkit.bench fast` at its best: every setting tried, the fastest kept.

A peer is only beaten fairly at its own best settings, and two of them belong to the process, not to the
model: the OpenMP wait policy (read once, when torch or llama.cpp loads) and the thread count. So each
measurement runs in a child process per wait policy (labkit.fast.processes.run_in_child, running
labkit.benchmarks.fast_child), which times its rows at one or every thread count and prints one JSON
object per try. Here the tries come back as Rows, the fastest of each label is kept, and a report names
every try, so a reader sees what "at its best" was chosen from:

    >>> best, tried = llama_cpp_best(32, 3)            # llama.cpp in a process per policy
    >>> print(tried)
    PASSIVE  llama.cpp: 1 threads 70.0 tok/s, 2 threads 36.0 tok/s
    ACTIVE   llama.cpp: 1 threads 71.2 tok/s, 2 threads 106.0 tok/s
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from labkit.benchmarks.fast_rows import CHILD, LABKIT_ROWS, LLAMA_CPP, Row
from labkit.core.arguments import check_int
from labkit.core.doors import check_items
from labkit.fast.cost import StepCosts
from labkit.fast.processes import WAIT_POLICIES, check_policy, run_in_child


def best_rows(rows: Sequence[Row]) -> list[Row]:
    """The fastest row of each label (over policies and thread counts), in the order labels first appear; one
    timed alone (unpredicted) takes the cost model's terms of its label at the same policy and thread count."""
    best: dict[str, Row] = {}
    for row in (
        r for r in rows if r.label not in best or r.tokens_per_second > best[r.label].tokens_per_second
    ):
        best[row.label] = row
    costs = {(r.label, r.policy, r.threads): r.costs for r in rows if r.costs is not None}
    return [replace(r, costs=r.costs or costs.get((r.label, r.policy, r.threads))) for r in best.values()]


def row_from_child(record: dict) -> Row:
    """A Row from one JSON object of labkit.benchmarks.fast_child."""
    costs = StepCosts(**record["costs"]) if record.get("costs") else None
    return Row(
        record["label"],
        record["threads"],
        record["tokens_per_second"],
        record["bytes_per_token"],
        record["policy"],
        costs,
    )


def settings_report(records: list[dict]) -> str:
    """What each setting gave: labkit's thread probe and llama.cpp's sweep, per policy."""
    lines = []
    for policy in dict.fromkeys(r["policy"] for r in records):
        probe = next((r["probe"] for r in records if r["policy"] == policy and r.get("probe")), None)
        if probe:
            timings = ", ".join(f"{count} -> {seconds:.2f} s" for count, seconds in probe.items())
            lines.append(f"{policy:<8} labkit int4 probe, threads -> seconds: {timings}")
        for label in dict.fromkeys(r["label"] for r in records if r["policy"] == policy):
            # labkit's other rows ran at the probe's count
            sweep = [
                r
                for r in records
                if r["policy"] == policy and r["label"] == label and (label == LLAMA_CPP or r.get("alone"))
            ]
            if sweep:
                name = "llama.cpp" if label == LLAMA_CPP else f"{label.lstrip('+ ')}, alone"
                lines.append(
                    f"{policy:<8} {name}: "
                    + ", ".join(f"{r['threads']} threads {r['tokens_per_second']:.1f} tok/s" for r in sweep)
                )
    return "\n".join(lines)


def best_in_children(args: list[str], policies: Sequence[str]) -> tuple[list[Row], str]:
    """fast_child with `args` in a process per policy: (each label's fastest Row, the report of every try)."""
    children = [record for policy in policies for record in run_in_child(CHILD, args, policy)]
    return best_rows([row_from_child(record) for record in children]), settings_report(children)


def llama_cpp_best(
    new_tokens: int, repeats: int, policies: Sequence[str] = WAIT_POLICIES
) -> tuple[Row | None, str]:
    """llama.cpp at its best: timed in a process of its own per wait policy, at every thread count.
    (the fastest Row or None when llama_cpp is missing, the settings report of every try)

        >>> best, tried = llama_cpp_best(32, 3)
        >>> best.policy, best.threads, round(best.tokens_per_second)
        ('ACTIVE', 2, 106)
    """
    check_int("new_tokens", new_tokens, minimum=1)
    check_int("repeats", repeats, minimum=1)
    for policy in check_items("policies", policies, "OpenMP wait policies (str)", of=str):
        check_policy(policy)
    rows, report = best_in_children(
        ["llama_cpp", "--tokens", str(new_tokens), "--repeats", str(repeats)], policies
    )
    return (rows[0] if rows else None), report


def row_best(
    label: str, new_tokens: int, repeats: int, policies: Sequence[str] = WAIT_POLICIES
) -> tuple[Row, str]:
    """One labkit row of ROWS at its best, timed as llama_cpp_best times llama.cpp: (fastest Row, report).

    >>> row_best(Q4_1_COMPILED, 32, 3)[0].policy
    'ACTIVE'
    """
    if label not in LABKIT_ROWS:
        raise ValueError(f"Unknown labkit row {label!r}; the rows are: {LABKIT_ROWS}.")
    [fastest, *_], report = best_in_children(
        ["row", "--row", label, "--tokens", str(new_tokens), "--repeats", str(repeats)], policies
    )
    return fastest, report
