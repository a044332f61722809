"""Speculation under load (labkit.serving.spec_load, notebook 09's section 7): the engine in each mode on the
copy and free workloads, the speed-up table, and the cost model E(alpha, k) v(B) / v(B (1 + k))."""

import pytest

from labkit.serving.spec_load import (
    MODES,
    LoadRun,
    copy_chat,
    load_speedups,
    load_table,
    predicted_load_speedup,
    speculation_under_load,
    story_chat,
)


def test_the_cost_model_charges_the_wider_pass():
    v = {1: 1.0, 5: 1.25, 8: 2.0, 40: 8.0}
    assert predicted_load_speedup(1.0, 4, 1, v) == pytest.approx(5 / 1.25)  # the ceiling: every draft kept
    assert predicted_load_speedup(1.0, 4, 8, v) == pytest.approx(5 * 2.0 / 8.0)
    assert predicted_load_speedup(0.0, 4, 1, v) == pytest.approx(1 / 1.25)  # no draft kept: pure cost
    with pytest.raises(ValueError, match=r"pass_cost must hold v\(2\) and v\(10\)"):
        predicted_load_speedup(0.5, 4, 2, v)


def test_speedups_divide_by_the_same_workload_and_batch_without_drafts():
    runs = [
        LoadRun("copy", 8, "no drafts", 100, 4.0, 0, 0),
        LoadRun("copy", 8, "k = 4", 100, 2.0, 120, 90),
        LoadRun("free", 8, "no drafts", 100, 5.0, 0, 0),
    ]
    gains = load_speedups(runs)
    assert gains["copy", 8, "k = 4"] == pytest.approx(2.0) and gains["free", 8, "no drafts"] == 1.0
    assert runs[1].alpha == 0.75
    lines = load_table(runs[:2]).splitlines()
    assert lines[1].split()[-3:] == ["0", "-", "1.00x"] and lines[2].split()[-3:] == ["120", "75%", "2.00x"]


def test_each_chat_is_its_own_prompt_and_only_copy_holds_its_answer():
    assert (
        len({str(copy_chat(i)) for i in range(8)}) == 8 and len({str(story_chat(i)) for i in range(8)}) == 8
    )
    assert "word for word" in copy_chat(0)[1]["content"] and "story" in story_chat(0)[1]["content"]


def test_every_mode_runs_on_the_engine_and_only_the_drafting_ones_draft(tiny, tokenizer, one_thread):
    runs = speculation_under_load(tiny, tokenizer, batch_sizes=(1, 3), max_new_tokens=6)
    assert [(r.workload, r.requests, r.mode) for r in runs] == [
        (work, b, mode) for work in ("copy", "free") for b in (1, 3) for mode in MODES
    ]
    assert all(0 < r.tokens <= 6 * r.requests and r.seconds > 0 for r in runs)
    assert all(r.drafted == 0 for r in runs if r.mode == "no drafts")
    assert all(0 <= r.kept <= r.drafted for r in runs)
    with pytest.raises(ValueError, match="batch_sizes"):
        speculation_under_load(tiny, tokenizer, batch_sizes=(0,))
