"""Speed-up of speculative over plain greedy decoding, for several drafters and tasks, timed in turns.

For each task, plain decoding and every candidate are timed once per round (plain, candidate 1, ...,
plain, ...), so a change of the machine's load hits them alike. Each run's prompt prefill is timed apart
from its decode phase, so there are two speed-ups, each the median speculative rate over the median
plain rate, with the range of the per-round ratios:
- decode: tokens/s of the decode phase alone, what the cost model of `labkit.speculative.cost` predicts.
  Plain decoding: 1 / TPOT (notebook 07), its tokens after the first over the time after the first;
  speculative: all its tokens over its rounds (`SpeculativeStats.decode_s`);
- end to end: tokens over the whole run, the prompt's prefill (paid once by both) included.

    >>> rows = speedup_sweep(model, tokenizer, {"extractive": prompt},
    ...                      [("prompt lookup", PromptLookupDrafter(3), 4, False)], new_tokens=32, repeats=3)
    >>> print(sweep_table(rows))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from torch import nn
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.doors import check_items
from labkit.decoding.generate import generate
from labkit.decoding.request import Prompt
from labkit.metrics import RequestMetrics, timed
from labkit.speculative.cost import predicted_speedup, rounds_speedup
from labkit.speculative.generate import Drafter, SpeculativeResult, SpeculativeStats, speculative_generate
from labkit.speculative.rule import expected_tokens_per_step
from labkit.table import Column, format_row, format_table
from labkit.timing import Spread, interleaved_seconds

Candidate = tuple[str, Drafter, int, bool]  # (label, drafter, gamma, adaptive)


@dataclass(frozen=True)
class Speedup:
    """Speculative against plain decoding, timed in the same rounds: the tokens/s of each, median [min-max],
    the ratio of the medians, and the range of the per-round ratios."""

    plain: Spread  # plain greedy decoding, tokens/s
    rate: Spread  # speculative decoding, tokens/s
    ratio: float  # rate.median / plain.median
    ratio_range: tuple[float, float]  # min and max of the per-round ratios

    @classmethod
    def of(cls, plain_rates: Sequence[float], rates: Sequence[float]) -> Speedup:
        """From the tokens/s of each round: plain_rates[i] and rates[i] were timed in the same round.

        >>> Speedup.of([20.0, 25.0, 20.0], [40.0, 40.0, 60.0]).format()
        '2.00x [1.60-3.00]'
        """
        if not rates or len(rates) != len(plain_rates):
            raise ValueError(
                f"Speedup.of needs one plain and one speculative rate per round, got "
                f"{len(plain_rates)} and {len(rates)}."
            )
        plain, rate = Spread.of(plain_rates), Spread.of(rates)
        ratios = [r / p for r, p in zip(rates, plain_rates)]
        return cls(plain, rate, rate.median / plain.median, (min(ratios), max(ratios)))

    def format(self) -> str:
        """'2.35x [2.10-2.51]': the ratio of the medians, then the range of the per-round ratios."""
        low, high = self.ratio_range
        return f"{self.ratio:.2f}x [{low:.2f}-{high:.2f}]"


@dataclass(frozen=True)
class SweepRow:
    """One task and candidate: its counts (greedy, so the same every repeat) and its timings."""

    task: str
    drafter: str  # the candidate's label
    gamma: int  # draft tokens per call (the most per call when adaptive)
    stats: SpeculativeStats  # counts of the last timed run
    decode: Speedup  # the decode phase alone: what the cost model predicts
    end_to_end: Speedup  # whole runs: the prompt's prefill included
    plain_prefill: (
        Spread  # seconds to plain decoding's first token (TTFT: the prompt's pass, the first choice)
    )
    prefill: Spread  # seconds of the speculative run's prefill (SpeculativeStats.prefill_s)
    same: bool  # the speculative tokens equal plain greedy decoding's


def speedup_sweep(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Mapping[str, Prompt],
    candidates: Sequence[Candidate],
    new_tokens: int,
    repeats: int = 3,
    progress: Callable[[Iterable], Iterable] | None = None,
) -> list[SweepRow]:
    """Time plain greedy decoding and each candidate on each prompt, interleaved; one SweepRow per pair.

    prompts: {task name: prompt}. new_tokens: at least 2 (a decode phase after the first token). Runs are
    not warmed up (the model should be warm already).

        >>> row = speedup_sweep(model, tokenizer, {"open-ended": prompt}, candidates, new_tokens=32)[0]
        >>> row.decode.ratio, row.end_to_end.ratio          # decoding alone; the prompt's prefill included
    """
    check_int(
        "new_tokens", new_tokens, minimum=2, note="plain decoding's decode phase starts after the first token"
    )
    rows = []
    for task, prompt in prompts.items():
        rows += _task_rows(model, tokenizer, task, prompt, candidates, new_tokens, repeats, progress)
    return rows


def _task_rows(
    model,
    tokenizer,
    task: str,
    prompt: Prompt,
    candidates: Sequence[Candidate],
    new_tokens: int,
    repeats: int,
    progress,
) -> list[SweepRow]:
    """One task: `repeats` rounds of plain decoding then each candidate, each run's prefill timed apart."""
    plain_runs: list[RequestMetrics] = []
    plain_ids: list[int] = []
    results: list[list[SpeculativeResult]] = [[] for _ in candidates]

    def plain() -> None:
        stream = timed(generate(model, tokenizer, prompt, max_new_tokens=new_tokens), track_memory=False)
        plain_runs.append(stream.consume().metrics())
        plain_ids[:] = stream.token_ids

    def speculative(index: int, drafter: Drafter, gamma: int, adaptive: bool) -> Callable[[], None]:
        def run() -> None:
            results[index].append(
                speculative_generate(
                    model,
                    tokenizer,
                    prompt,
                    drafter=drafter,
                    gamma=gamma,
                    max_new_tokens=new_tokens,
                    adaptive=adaptive,
                )
            )

        return run

    runs = [plain] + [speculative(i, d, g, a) for i, (_, d, g, a) in enumerate(candidates)]
    seconds = interleaved_seconds(runs, repeats, progress=progress)
    baseline = PlainBaseline.of(task, plain_runs, plain_ids, seconds[0])
    return [
        candidate_row(task, candidate, baseline, candidate_runs, candidate_seconds)
        for candidate, candidate_runs, candidate_seconds in zip(candidates, results, seconds[1:])
    ]


@dataclass(frozen=True)
class PlainBaseline:
    """Plain greedy decoding of one task, timed in the sweep's rounds: what each candidate is measured against."""

    token_ids: list[int]  # plain greedy decoding's tokens (the same every round)
    decode_rates: list[float]  # tokens/s of each round's decode phase (1 / TPOT)
    total_rates: list[float]  # tokens/s of each round's whole run, the prompt's prefill included
    prefill: Spread  # seconds to the first token (TTFT)

    @classmethod
    def of(
        cls, task: str, runs: Sequence[RequestMetrics], token_ids: list[int], seconds: Sequence[float]
    ) -> PlainBaseline:
        """From the rounds' metrics and seconds; a ValueError when the answer is too short to have a decode phase.

        >>> PlainBaseline.of("extractive", plain_runs, plain_ids, seconds[0]).prefill.median
        """
        if len(token_ids) < 2:
            raise ValueError(
                f"Plain decoding of task {task!r} stopped after {len(token_ids)} token: a decode phase "
                "needs 2 or more. Use a prompt whose answer is longer."
            )
        return cls(
            token_ids,
            [m.decode_tokens_per_s for m in runs],
            [len(token_ids) / s for s in seconds],
            Spread.of([m.ttft_s for m in runs]),
        )


def candidate_row(
    task: str,
    candidate: Candidate,
    plain: PlainBaseline,
    runs: Sequence[SpeculativeResult],
    seconds: Sequence[float],
) -> SweepRow:
    """One candidate's SweepRow from its timed runs (runs[i] and seconds[i] of round i) against plain decoding.

    >>> candidate_row("extractive", ("prompt lookup", drafter, 4, False), baseline, results, seconds).same
    True
    """
    label, _, gamma, _ = candidate
    last = runs[-1]
    decode = Speedup.of(plain.decode_rates, [r.stats.new_tokens / r.stats.decode_s for r in runs])
    end_to_end = Speedup.of(plain.total_rates, [len(last.token_ids) / s for s in seconds])
    prefill = Spread.of([r.stats.prefill_s for r in runs])
    return SweepRow(
        task,
        label,
        gamma,
        last.stats,
        decode,
        end_to_end,
        plain.prefill,
        prefill,
        last.token_ids == plain.token_ids,
    )


SPACER = Column("", 2)  # two blanks between the numbers and the text columns
SWEEP_COLUMNS = [
    Column("task", 11, align="<"),
    Column("drafter", 17, align="<"),
    Column("gamma", 5),
    Column("alpha", 6, ".2f"),
    Column("tok/call", 9, ".2f"),
    Column("prefill ms", 11, ".0f"),
    SPACER,
    Column("decode tok/s", 20, align="<"),
    Column("decode speed-up", 19, align="<"),
    Column("end to end", 12, align="<"),
    Column("same", 0, align="<"),
]
PLAIN_COLUMNS = SWEEP_COLUMNS[:7]  # plain decoding's line: up to the spacer, then its decode rate as written


def sweep_table(rows: Sequence[SweepRow]) -> str:
    """The rows as a fixed-width table, each task's plain greedy decoding first: counts, prefill (ms, median),
    decode tokens/s median [min-max], decode speed-up of the medians [range], end-to-end speed-up."""
    check_items(
        "rows", rows, "SweepRow (labkit.speculative.sweep.speedup_sweep)", has=("task", "drafter", "gamma")
    )
    lines = [format_row(SWEEP_COLUMNS, [column.title for column in SWEEP_COLUMNS])]
    for index, r in enumerate(rows):
        if index == 0 or rows[index - 1].task != r.task:
            plain = [r.task, "plain greedy", "-", "-", 1, r.plain_prefill.median * 1e3, ""]
            lines.append(format_row(PLAIN_COLUMNS, plain) + r.decode.plain.format(1))
        lines.append(
            format_row(
                SWEEP_COLUMNS,
                [
                    r.task,
                    r.drafter,
                    r.gamma,
                    r.stats.acceptance_rate,
                    r.stats.tokens_per_call,
                    r.prefill.median * 1e3,
                    "",
                    r.decode.rate.format(1),
                    r.decode.format(),
                    f"{r.end_to_end.ratio:.2f}x",
                    r.same,
                ],
            )
        )
    return "\n".join(lines)


PREDICTION_COLUMNS = [
    Column("task", 11, align="<"),
    Column("drafter", 17, align="<"),
    Column("gamma", 5),
    Column("alpha", 6, ".2f"),
    Column("E", 6, ".2f"),
    Column("tok/call", 9, ".2f"),
    Column("c", 6, ".2f"),
    Column("v", 6, ".2f"),
    Column("formula", 9),
    Column("rounds", 8),
    SPACER,
    Column("measured decode", 19, align="<"),
    Column("end to end", 0, align="<"),
]


def prediction_table(
    rows: Sequence[SweepRow], draft_costs: Mapping[str, float], verify_costs: Mapping[int, float]
) -> str:
    """Predicted against measured speed-up, per row: the formula E(alpha, gamma) / (gamma c + v(gamma + 1)),
    the same costs summed over the rounds that ran (`rounds_speedup`), the measured decode speed-up (the
    prefill timed apart, as the model leaves it out) median [range], and the end-to-end one.

    draft_costs: {drafter label: c} (labkit.speculative.cost.draft_cost); verify_costs: {n: v(n)} for
    n = 1 .. gamma + 1 (labkit.speculative.cost.verification_costs).
    """
    check_items(
        "rows", rows, "SweepRow (labkit.speculative.sweep.speedup_sweep)", has=("task", "drafter", "gamma")
    )
    cells = []
    for r in rows:
        c, v = draft_costs[r.drafter], verify_costs[r.gamma + 1]
        alpha = r.stats.acceptance_rate
        formula, rounds = (
            predicted_speedup(alpha, r.gamma, c, v),
            rounds_speedup(r.stats.steps, c, verify_costs),
        )
        cells.append(
            [
                r.task,
                r.drafter,
                r.gamma,
                alpha,
                expected_tokens_per_step(alpha, r.gamma),
                r.stats.tokens_per_call,
                c,
                v,
                f"{formula:.2f}x",
                f"{rounds:.2f}x",
                "",
                r.decode.format(),
                f"{r.end_to_end.ratio:.2f}x",
            ]
        )
    return format_table(PREDICTION_COLUMNS, cells)
