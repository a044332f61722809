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
            raise ValueError(f"Speedup.of needs one plain and one speculative rate per round, got "
                             f"{len(plain_rates)} and {len(rates)}.")
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
    plain_prefill: Spread  # seconds to plain decoding's first token (TTFT: the prompt's pass, the first choice)
    prefill: Spread  # seconds of the speculative run's prefill (SpeculativeStats.prefill_s)
    same: bool  # the speculative tokens equal plain greedy decoding's


def speedup_sweep(model: nn.Module, tokenizer: PreTrainedTokenizerBase, prompts: Mapping[str, Prompt],
                  candidates: Sequence[Candidate], new_tokens: int, repeats: int = 3,
                  progress: Callable[[Iterable], Iterable] | None = None) -> list[SweepRow]:
    """Time plain greedy decoding and each candidate on each prompt, interleaved; one SweepRow per pair.

    prompts: {task name: prompt}. new_tokens: at least 2 (a decode phase after the first token). Runs are
    not warmed up (the model should be warm already).

        >>> row = speedup_sweep(model, tokenizer, {"open-ended": prompt}, candidates, new_tokens=32)[0]
        >>> row.decode.ratio, row.end_to_end.ratio          # decoding alone; the prompt's prefill included
    """
    check_int("new_tokens", new_tokens, minimum=2, note="plain decoding's decode phase starts after the first token")
    rows = []
    for task, prompt in prompts.items():
        rows += _task_rows(model, tokenizer, task, prompt, candidates, new_tokens, repeats, progress)
    return rows


def _task_rows(model, tokenizer, task: str, prompt: Prompt, candidates: Sequence[Candidate], new_tokens: int,
               repeats: int, progress) -> list[SweepRow]:
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
            results[index].append(speculative_generate(model, tokenizer, prompt, drafter=drafter, gamma=gamma,
                                                       max_new_tokens=new_tokens, adaptive=adaptive))
        return run

    runs = [plain] + [speculative(i, d, g, a) for i, (_, d, g, a) in enumerate(candidates)]
    seconds = interleaved_seconds(runs, repeats, progress=progress)
    if len(plain_ids) < 2:
        raise ValueError(f"Plain decoding of task {task!r} stopped after {len(plain_ids)} token: a decode phase "
                         "needs 2 or more. Use a prompt whose answer is longer.")
    plain_decode = [m.decode_tokens_per_s for m in plain_runs]  # 1 / TPOT
    plain_total = [len(plain_ids) / s for s in seconds[0]]
    plain_prefill = Spread.of([m.ttft_s for m in plain_runs])
    rows = []
    for index, (label, _, gamma, _) in enumerate(candidates):
        runs_of_candidate, last = results[index], results[index][-1]
        decode = Speedup.of(plain_decode, [r.stats.new_tokens / r.stats.decode_s for r in runs_of_candidate])
        end_to_end = Speedup.of(plain_total, [len(last.token_ids) / s for s in seconds[index + 1]])
        prefill = Spread.of([r.stats.prefill_s for r in runs_of_candidate])
        rows.append(SweepRow(task, label, gamma, last.stats, decode, end_to_end, plain_prefill, prefill,
                             last.token_ids == plain_ids))
    return rows


def sweep_table(rows: Sequence[SweepRow]) -> str:
    """The rows as a fixed-width table, each task's plain greedy decoding first: counts, prefill (ms, median),
    decode tokens/s median [min-max], decode speed-up of the medians [range], end-to-end speed-up."""
    check_items("rows", rows, "SweepRow (labkit.speculative.sweep.speedup_sweep)", has=("task", "drafter", "gamma"))
    lines = [f"{'task':<11}{'drafter':<17}{'gamma':>5}{'alpha':>6}{'tok/call':>9}{'prefill ms':>11}  "
             f"{'decode tok/s':<20}{'decode speed-up':<19}{'end to end':<12}same"]
    for index, r in enumerate(rows):
        if index == 0 or rows[index - 1].task != r.task:
            lines.append(f"{r.task:<11}{'plain greedy':<17}{'-':>5}{'-':>6}{1:>9.2f}"
                         f"{r.plain_prefill.median * 1e3:>11.0f}  {r.decode.plain.format(1)}")
        lines.append(f"{r.task:<11}{r.drafter:<17}{r.gamma:>5}{r.stats.acceptance_rate:>6.2f}"
                     f"{r.stats.tokens_per_call:>9.2f}{r.prefill.median * 1e3:>11.0f}  {r.decode.rate.format(1):<20}"
                     f"{r.decode.format():<19}{f'{r.end_to_end.ratio:.2f}x':<12}{r.same}")
    return "\n".join(lines)


def prediction_table(rows: Sequence[SweepRow], draft_costs: Mapping[str, float],
                     verify_costs: Mapping[int, float]) -> str:
    """Predicted against measured speed-up, per row: the formula E(alpha, gamma) / (gamma c + v(gamma + 1)),
    the same costs summed over the rounds that ran (`rounds_speedup`), the measured decode speed-up (the
    prefill timed apart, as the model leaves it out) median [range], and the end-to-end one.

    draft_costs: {drafter label: c} (labkit.speculative.cost.draft_cost); verify_costs: {n: v(n)} for
    n = 1 .. gamma + 1 (labkit.speculative.cost.verification_costs).
    """
    check_items("rows", rows, "SweepRow (labkit.speculative.sweep.speedup_sweep)", has=("task", "drafter", "gamma"))
    lines = [f"{'task':<11}{'drafter':<17}{'gamma':>5}{'alpha':>6}{'E':>6}{'tok/call':>9}{'c':>6}{'v':>6}"
             f"{'formula':>9}{'rounds':>8}  {'measured decode':<19}end to end"]
    for r in rows:
        c, v = draft_costs[r.drafter], verify_costs[r.gamma + 1]
        alpha = r.stats.acceptance_rate
        formula, rounds = predicted_speedup(alpha, r.gamma, c, v), rounds_speedup(r.stats.steps, c, verify_costs)
        expected = expected_tokens_per_step(alpha, r.gamma)
        lines.append(f"{r.task:<11}{r.drafter:<17}{r.gamma:>5}{alpha:>6.2f}"
                     f"{expected:>6.2f}{r.stats.tokens_per_call:>9.2f}{c:>6.2f}{v:>6.2f}"
                     f"{formula:>8.2f}x{rounds:>7.2f}x  {r.decode.format():<19}{r.end_to_end.ratio:.2f}x")
    return "\n".join(lines)
