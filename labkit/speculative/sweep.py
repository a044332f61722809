"""Speed-up of speculative over plain greedy decoding, for several drafters and tasks, timed in turns.

For each task, plain decoding and every candidate are timed once per round (plain, candidate 1, ...,
plain, ...), so a change of the machine's load hits them alike. A speed-up is the median speculative
rate over the median plain rate; its range is that of the per-round ratios.

    >>> rows = speedup_sweep(model, tokenizer, {"extractive": prompt},
    ...                      [("prompt lookup", PromptLookupDrafter(3), 4, False)], new_tokens=32, repeats=3)
    >>> print(sweep_table(rows))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from torch import nn
from transformers import PreTrainedTokenizerBase

from labkit.decoding.generate import generate_ids
from labkit.decoding.request import Prompt
from labkit.speculative.cost import predicted_speedup, rounds_speedup
from labkit.speculative.generate import Drafter, SpeculativeStats, speculative_generate
from labkit.speculative.rule import expected_tokens_per_step
from labkit.timing import Spread, interleaved_seconds

Candidate = tuple[str, Drafter, int, bool]  # (label, drafter, gamma, adaptive)


@dataclass(frozen=True)
class SweepRow:
    """One task and candidate: its counts (greedy, so the same every repeat) and its timings."""

    task: str
    drafter: str  # the candidate's label
    gamma: int  # draft tokens per call (the most per call when adaptive)
    stats: SpeculativeStats  # counts of the last timed run
    plain: Spread  # plain greedy decoding, tokens/s
    rate: Spread  # speculative decoding, tokens/s
    speedup: float  # rate.median / plain.median
    ratio_range: tuple[float, float]  # min and max of the per-round speed-ups
    same: bool  # the speculative tokens equal plain greedy decoding's


def speedup_sweep(model: nn.Module, tokenizer: PreTrainedTokenizerBase, prompts: Mapping[str, Prompt],
                  candidates: Sequence[Candidate], new_tokens: int, repeats: int = 3,
                  progress: Callable[[Iterable], Iterable] | None = None) -> list[SweepRow]:
    """Time plain greedy decoding and each candidate on each prompt, interleaved; one SweepRow per pair.

    prompts: {task name: prompt}. Runs are not warmed up (the model should be warm already).

        >>> speedup_sweep(model, tokenizer, {"open-ended": prompt}, candidates, new_tokens=32)[0].speedup
        0.74
    """
    rows = []
    for task, prompt in prompts.items():
        plain_ids: list[int] = []
        results: dict[int, object] = {}

        def plain() -> None:
            plain_ids[:] = generate_ids(model, tokenizer, prompt, max_new_tokens=new_tokens)

        def speculative(index: int, drafter: Drafter, gamma: int, adaptive: bool) -> Callable[[], None]:
            def run() -> None:
                results[index] = speculative_generate(model, tokenizer, prompt, drafter=drafter, gamma=gamma,
                                                      max_new_tokens=new_tokens, adaptive=adaptive)
            return run
        runs = [plain] + [speculative(i, d, g, a) for i, (_, d, g, a) in enumerate(candidates)]
        seconds = interleaved_seconds(runs, repeats, progress=progress)
        plain_rates = [len(plain_ids) / s for s in seconds[0]]
        for index, (label, _, gamma, _) in enumerate(candidates):
            result = results[index]
            rates = [len(result.token_ids) / s for s in seconds[index + 1]]
            ratios = [r / p for r, p in zip(rates, plain_rates)]
            plain_spread, rate_spread = Spread.of(plain_rates), Spread.of(rates)
            rows.append(SweepRow(task, label, gamma, result.stats, plain_spread, rate_spread,
                                 rate_spread.median / plain_spread.median, (min(ratios), max(ratios)),
                                 result.token_ids == plain_ids))
    return rows


def sweep_table(rows: Sequence[SweepRow]) -> str:
    """The rows as a fixed-width table: counts, tokens/s median [min-max], speed-up of the medians [range]."""
    lines = [f"{'task':<11}{'drafter':<17}{'gamma':>5}{'alpha':>6}{'tok/call':>9}  {'plain tok/s':<17}"
             f"{'spec. tok/s':<18}{'speed-up':<17}same"]
    for r in rows:
        low, high = r.ratio_range
        lines.append(f"{r.task:<11}{r.drafter:<17}{r.gamma:>5}{r.stats.acceptance_rate:>6.2f}"
                     f"{r.stats.tokens_per_call:>9.2f}  {r.plain.format(1):<17}{r.rate.format(1):<18}"
                     f"{f'{r.speedup:.2f}x [{low:.2f}-{high:.2f}]':<17}{r.same}")
    return "\n".join(lines)


def prediction_table(rows: Sequence[SweepRow], draft_costs: Mapping[str, float],
                     verify_costs: Mapping[int, float]) -> str:
    """Predicted against measured speed-up, per row: the formula E(alpha, gamma) / (gamma c + v(gamma + 1)),
    the same costs summed over the rounds that ran (`rounds_speedup`), and the measured median [range].

    draft_costs: {drafter label: c} (labkit.speculative.cost.draft_cost); verify_costs: {n: v(n)} for
    n = 1 .. gamma + 1 (labkit.speculative.cost.verification_costs).
    """
    lines = [f"{'task':<11}{'drafter':<17}{'gamma':>5}{'alpha':>6}{'E':>6}{'tok/call':>9}{'c':>6}{'v':>6}"
             f"{'formula':>9}{'rounds':>8}  measured"]
    for r in rows:
        c, v = draft_costs[r.drafter], verify_costs[r.gamma + 1]
        alpha = r.stats.acceptance_rate
        low, high = r.ratio_range
        formula, rounds = predicted_speedup(alpha, r.gamma, c, v), rounds_speedup(r.stats.steps, c, verify_costs)
        expected = expected_tokens_per_step(alpha, r.gamma)
        lines.append(f"{r.task:<11}{r.drafter:<17}{r.gamma:>5}{alpha:>6.2f}"
                     f"{expected:>6.2f}{r.stats.tokens_per_call:>9.2f}{c:>6.2f}{v:>6.2f}"
                     f"{formula:>8.2f}x{rounds:>7.2f}x  {r.speedup:.2f}x [{low:.2f}-{high:.2f}]")
    return "\n".join(lines)
