"""An answer a labkit function computed is refused even when it is only a number or a string: the checker
reads the kernel's input history for the assignment of the answer it was given (labkit.checks.own_answer).
The history is set here as IPython would hold it; tests/grade runs the same in a real kernel."""

import pytest

from labkit import checks
from labkit.checks import own_answer
from labkit.models.sizing import model_shape

RIGHT = model_shape("smollm2-135m").kv_cache_bytes(4096, 8, "fp16")
CHECK = "passed = checks.check_kv_cache_bytes(kv_bytes)"


@pytest.fixture
def history(monkeypatch):
    cells: list[str] = []
    monkeypatch.setattr(own_answer, "input_history", lambda: cells)
    return cells


def test_labkit_s_own_answer_is_refused_in_the_answer_cell(history, capsys):
    history += ['kv_bytes = model_shape("smollm2-135m").kv_cache_bytes(4096, 8, "fp16")\n' + CHECK]
    assert checks.check_kv_cache_bytes(RIGHT) is False
    assert "computed by labkit's own kv_cache_bytes" in capsys.readouterr().out


def test_and_in_a_cell_before_it(history, capsys):
    history += ['kv_bytes = shape.kv_cache_bytes(4096, 8, "fp16")', "x = 1", CHECK]
    assert checks.check_kv_cache_bytes(RIGHT) is False


def test_the_students_own_arithmetic_passes_even_where_labkit_is_called_elsewhere(history, capsys):
    history += [
        'cache = shape.kv_cache_bytes(256, 1, "fp16")  # a section above the exercise',
        "kv_bytes = 30 * 2 * 3 * 64 * 4096 * 8 * 2\n" + CHECK,
    ]
    assert checks.check_kv_cache_bytes(RIGHT) is True, capsys.readouterr().out


def test_the_latest_assignment_counts(history, capsys):
    history += [
        'kv_bytes = shape.kv_cache_bytes(4096, 8, "fp16")',
        "kv_bytes = 30 * 2 * 3 * 64 * 4096 * 8 * 2",
        CHECK,
    ]
    assert checks.check_kv_cache_bytes(RIGHT) is True, capsys.readouterr().out


def test_a_chat_string_from_the_template_is_refused(history):
    history += [
        "answer = tokenizer.apply_chat_template(conversation, tokenize=False)\npassed = checks.check_chat_string(answer, tokenizer, conversation)"
    ]
    assert own_answer.answer_computed_by("check_chat_string", ["apply_chat_template", "chat_prompt"]) == (
        "apply_chat_template"
    )


def test_outside_ipython_nothing_is_refused():
    assert own_answer.input_history() == []
    assert own_answer.answer_computed_by("check_kv_cache_bytes", ["kv_cache_bytes"]) is None
