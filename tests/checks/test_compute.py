"""Notebook 14's checkers check the work: the vote must read and normalize answers itself (labkit's vote and
answer reader do not count), the copy on write is run on a forked pool and judged by what each sequence
reads and by the bookkeeping, and the frontier's reading is held against the student's own accuracies."""

import re
from collections import Counter

import pytest

from labkit import checks
from labkit.checks.compute import WHY, why_voting
from labkit.checks.work import reset_all
from labkit.compute.choose import Sample, self_consistency
from labkit.compute.cow_exercise import copy_on_write_append
from labkit.compute.verifiable import extract_answer, majority_answer
from tests.checks.test_no_giveaway import scored

OWN = "calling labkit's version does not count"


@pytest.fixture(autouse=True)
def fresh_hints():
    reset_all()


def said(capsys, checker, *args) -> tuple[bool, str]:
    capsys.readouterr()
    return checker(*args), capsys.readouterr().out


def my_vote(texts):
    answers = []
    for text in texts:
        found = re.findall(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?", text)
        if found:
            answer = found[-1].replace(",", "").lstrip("+")
            answers.append(answer.rstrip("0").rstrip(".") if "." in answer else answer)
    counts = Counter(answers)
    return max(counts, key=counts.__getitem__) if counts else None


def test_the_vote_passes_when_written_and_not_when_borrowed(capsys):
    assert said(capsys, checks.check_majority_vote, my_vote)[0]
    for borrowed in (
        majority_answer,
        lambda t: majority_answer(t),
        lambda t: Counter(map(extract_answer, t)).most_common(1)[0][0],
        lambda t: self_consistency([Sample(x, extract_answer(x), 1, 0.0) for x in t]),
    ):
        passed, out = said(capsys, checks.check_majority_vote, borrowed)
        assert not passed and OWN in out


def test_a_vote_on_raw_texts_is_told_to_read_answers_first(capsys):
    passed, out = said(capsys, checks.check_majority_vote, lambda texts: max(texts, key=texts.count))
    assert not passed and "count answers, not texts" in out
    passed, out = said(capsys, checks.check_majority_vote, None)
    assert not passed and "Not attempted" in out


def test_copy_on_write_is_judged_by_what_each_sequence_reads(capsys):
    def fixed(pool, name, token):
        table = pool.tables[name]
        if not table or len(pool.blocks[table[-1]]) == pool.block_size:
            table.append(pool.take())
        elif pool.refs[table[-1]] > 1:
            shared, private = table[-1], pool.take()
            pool.blocks[private] = list(pool.blocks[shared])
            pool.release(shared)
            table[-1] = private
        pool.blocks[table[-1]].append(token)

    def no_copy(pool, name, token):
        table = pool.tables[name]
        if not table or len(pool.blocks[table[-1]]) == pool.block_size:
            table.append(pool.take())
        pool.blocks[table[-1]].append(token)

    assert said(capsys, checks.check_copy_on_write, fixed)[0]
    passed, out = said(capsys, checks.check_copy_on_write, no_copy)
    assert not passed and "another sequence's token" in out
    passed, out = said(capsys, checks.check_copy_on_write, copy_on_write_append)
    assert not passed and OWN in out


@pytest.mark.parametrize(
    "greedy, voted, sampled, why",
    [
        (scored(5), scored(4), scored(27), "outvoted"),
        (scored(5), scored(30), scored(40), "voting works"),
        (scored(5), scored(14), scored(20), "voting works"),  # the intervals overlap; the paired test tells
        (scored(5), scored(6), scored(9), "rarely sampled"),
    ],
)
def test_the_reason_follows_the_three_accuracies(greedy, voted, sampled, why):
    assert why_voting(voted, greedy, sampled) == why and why in WHY


def test_the_frontier_reading_takes_points_interval_and_reason_in_turn(capsys, as_measured):
    greedy, voted, sampled = as_measured(scored(5), scored(4), scored(27))
    gain = 100 * (voted.rate - greedy.rate)
    assert said(capsys, checks.check_frontier_reading, gain, False, "outvoted", greedy, voted, sampled)[0]
    passed, out = said(
        capsys, checks.check_frontier_reading, gain / 100, False, "outvoted", greedy, voted, sampled
    )
    assert not passed and "percentage points" in out
    passed, out = said(capsys, checks.check_frontier_reading, gain, True, "outvoted", greedy, voted, sampled)
    assert not passed and "paired test" in out
    passed, out = said(
        capsys, checks.check_frontier_reading, gain, False, "rarely sampled", greedy, voted, sampled
    )
    assert not passed and "does not fit your measurement" in out


def test_the_paired_test_tells_apart_what_overlapping_intervals_do_not():
    # 8 % and 23 % of 60: the vote right on every item greedy was, and 9 more
    greedy, voted = scored(5), scored(14)
    assert voted.overlaps(greedy)
    paired = voted.paired_with(greedy)
    assert (paired.only_first, paired.only_second, paired.both, paired.neither) == (9, 0, 5, 46)
    assert paired.p_value == 2 / 2**9 and paired.apart
