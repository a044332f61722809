"""Measuring speculative decoding: alpha counts only verified drafts, the cost model's arithmetic, the split
of a run into prefill and decode, and the structure of the interleaved timings (which run when, what is
returned); no timing value is asserted."""

import pytest

import labkit
from labkit.speculative.cost import draft_cost, predicted_speedup, rounds_speedup, verification_costs
from labkit.speculative.drafters import PromptLookupDrafter, early_exit_drafter
from labkit.speculative.generate import DraftStep, SpeculativeStats, speculative_generate
from labkit.speculative.rule import expected_tokens_per_step
from labkit.speculative.sweep import Speedup, prediction_table, speedup_sweep, sweep_table
from labkit.timing import Spread, interleaved_seconds

PROMPT = [1, 504, 3575, 282, 4649, 314, 504, 3575]  # repeats "504 3575", so prompt lookup has matches


def test_alpha_counts_verified_drafts_only():
    stats = SpeculativeStats()
    stats.record(DraftStep((4, 8, 15, 16), 1, 9, False))  # 1 kept, the 2nd rejected, 2 never checked
    stats.record(DraftStep((23, 42), 2, 7, True))  # both kept, then the bonus
    stats.record(DraftStep((), 0, 5, True))  # nothing proposed: a plain step
    assert (stats.proposed, stats.accepted, stats.rejected, stats.empty_rounds) == (6, 3, 1, 1)
    assert stats.acceptance_rate == 3 / 4  # accepted / (accepted + rejected), not 3 / 6
    assert stats.kept_fraction == 3 / 6
    assert SpeculativeStats().acceptance_rate == 0.0


def test_stats_split_the_run_and_give_the_formula_at_their_alpha():
    stats = SpeculativeStats(accepted=3, rejected=1, gamma=4, wall_s=2.5, prefill_s=0.5)
    assert stats.decode_s == 2.0
    assert stats.formula_tokens_per_call == pytest.approx(expected_tokens_per_step(0.75, 4))


@pytest.mark.parametrize("drafter", ["lookup", "early exit"])
def test_speculative_generate_times_its_prefill_apart(tokenizer, drafter):
    target = labkit.tiny_model("labkit")
    draft = PromptLookupDrafter(2) if drafter == "lookup" else early_exit_drafter(target, 1)
    stats = speculative_generate(target, tokenizer, PROMPT, drafter=draft, gamma=3, max_new_tokens=6).stats
    assert stats.gamma == 3 and 0 < stats.prefill_s < stats.wall_s and stats.decode_s > 0
    if drafter == "early exit":  # the draft read the prompt in the prefill: the rounds then feed new tokens
        assert draft.sequence.ids[: len(PROMPT)] == PROMPT


def test_speedup_is_the_ratio_of_the_medians_with_the_range_of_the_rounds():
    speedup = Speedup.of([20.0, 25.0, 20.0], [40.0, 40.0, 60.0])
    assert (speedup.plain.median, speedup.rate.median, speedup.ratio) == (20.0, 40.0, 2.0)
    assert speedup.ratio_range == (1.6, 3.0) and speedup.format() == "2.00x [1.60-3.00]"
    with pytest.raises(ValueError, match="one plain and one speculative rate per round"):
        Speedup.of([20.0], [40.0, 41.0])


def test_spread_and_its_format():
    spread = Spread.of([3.0, 1.0, 2.0, 10.0])
    assert (spread.median, spread.low, spread.high) == (2.5, 1.0, 10.0)
    assert spread.format(1, "x") == "2.5x [1.0-10.0]"
    with pytest.raises(ValueError, match="at least one"):
        Spread.of([])


def test_interleaved_seconds_times_the_runs_in_turns():
    calls = []
    seconds = interleaved_seconds(
        [lambda: calls.append("plain"), lambda: calls.append("spec")], repeats=3, warmup=True
    )
    assert calls == ["plain", "spec"] * 4  # one warm-up round, then 3 rounds: plain, spec, plain, spec, ...
    assert [len(s) for s in seconds] == [3, 3] and all(t >= 0 for s in seconds for t in s)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="repeats"):
            interleaved_seconds([lambda: None], repeats=bad)


def test_cost_model_arithmetic():
    assert predicted_speedup(0.8, 4, 0.0, 1.0) == pytest.approx(expected_tokens_per_step(0.8, 4))
    assert predicted_speedup(0.5, 2, 0.25, 1.5) == pytest.approx(1.75 / (2 * 0.25 + 1.5))
    steps = [DraftStep((1, 2, 3), 3, 9, True), DraftStep((), 0, 5, True), DraftStep((7, 8), 0, 6, False)]
    # 4 + 1 + 1 tokens for (3c + v4) + v1 + (2c + v3)
    assert rounds_speedup(steps, 0.5, {1: 1.0, 3: 1.5, 4: 2.0}) == pytest.approx(6 / (1.5 + 2 + 1 + 1 + 1.5))
    with pytest.raises(ValueError, match=r"passes of \[3\] tokens"):
        rounds_speedup(steps, 0.5, {1: 1.0, 4: 2.0})


def test_verification_and_draft_costs_have_the_right_shape(tokenizer):
    target = labkit.tiny_model("labkit")
    costs = verification_costs(target, [3, 5], context=8, repeats=1)
    assert list(costs) == [1, 3, 5] and costs[1] == 1.0 and all(v > 0 for v in costs.values())
    drafter = early_exit_drafter(target, 1)
    c = draft_cost(drafter, target, tokenizer, PROMPT, gamma=2, repeats=1)
    assert isinstance(c, float) and c > 0
    assert drafter.sequence.ids[: len(PROMPT)] == PROMPT  # it timed drafting after the real context
    assert draft_cost(PromptLookupDrafter(2), target, tokenizer, PROMPT, gamma=2, repeats=1) >= 0


def test_speedup_sweep_rows_and_tables(tokenizer):
    target = labkit.tiny_model("labkit")
    candidates = [
        ("lookup", PromptLookupDrafter(2), 3, False),
        ("exit 1", early_exit_drafter(target, 1), 2, True),
    ]
    rows = speedup_sweep(
        target, tokenizer, {"a": PROMPT, "b": PROMPT[:5]}, candidates, new_tokens=6, repeats=2
    )
    assert [(r.task, r.drafter, r.gamma) for r in rows] == [
        ("a", "lookup", 3),
        ("a", "exit 1", 2),
        ("b", "lookup", 3),
        ("b", "exit 1", 2),
    ]
    for r in rows:
        assert r.same and r.stats.new_tokens == 6
        for speedup in (r.decode, r.end_to_end):
            assert speedup.ratio == pytest.approx(speedup.rate.median / speedup.plain.median)
            assert speedup.plain.low <= speedup.plain.median <= speedup.plain.high
            assert speedup.ratio_range[0] <= speedup.ratio_range[1]
        assert r.plain_prefill.low > 0 and r.prefill.low > 0
    assert rows[0].decode.plain == rows[1].decode.plain  # one plain timing per task, shared by its candidates
    assert (
        rows[0].plain_prefill == rows[1].plain_prefill
        and rows[0].end_to_end.plain == rows[1].end_to_end.plain
    )
    table = sweep_table(rows).splitlines()
    assert len(table) == 7 and "decode speed-up" in table[0] and "exit 1" in table[3]
    # each task's first row
    assert [line.split()[1:3] for line in (table[1], table[4])] == [["plain", "greedy"]] * 2
    verify = verification_costs(target, range(1, 5), context=8, repeats=1)
    predicted = prediction_table(rows, {"lookup": 0.0, "exit 1": 0.5}, verify).splitlines()
    assert len(predicted) == 5 and "formula" in predicted[0] and "measured decode" in predicted[0]
    assert max(len(line) for line in table + predicted) <= 120  # fits a slide's printed width
    with pytest.raises(ValueError, match="new_tokens"):
        speedup_sweep(target, tokenizer, {"a": PROMPT}, candidates, new_tokens=1)
