"""A checker owns its problem: the arithmetic exercises' checkers take only the student's answer, set the
notebook's problem themselves, and refuse the right answer to a problem a student changed (another batch,
another model, fewer tokens), which they used to pass when the call carried the problem."""

import inspect

import pytest

from labkit import checks
from labkit.models.sizing import model_shape

GB = 1e9
SMOL, LLAMA = model_shape("smollm2-135m"), model_shape("llama-3.1-8b")
# checker: (the right answer to the notebook's problem, the right answer to a changed one, what changed)
CHANGED = {
    "check_kv_blocks": (3 + 1 + 1 + 5, 1 + 1 + 1, "three short sequences instead of four"),
    "check_kv_cache_bytes": (
        SMOL.kv_cache_bytes(4096, 8, "fp16"),
        SMOL.kv_cache_bytes(1, 8, "fp16"),
        "one token",
    ),
    "check_arithmetic_intensity": (2 * 8 / 4, 2 * 1 / 4, "batch 1"),
    "check_max_context": (
        LLAMA.max_tokens(71 * GB, 8, "fp16"),  # 80 GB less the VRAM reserve: 10 % + 1 GB
        LLAMA.max_tokens(71 * GB, 1, "fp16"),
        "batch 1",
    ),
    "check_quantized_megabytes": (
        106_168_320 * (4 + 16 / 64) / 8 / 1e6,
        1_000_000 * (4 + 16 / 64) / 8 / 1e6,
        "a million weights",
    ),
    "check_littles_law": (16 / 2.5, 1 / 2.5, "one request in flight"),
    "check_decode_bound": (50e9 / (8e9 * 4.5 / 8), 50e9 / (1e9 * 4.5 / 8), "a 1B model"),
    "check_model_choice": ("openai/gpt-oss-20b", "Qwen/Qwen3-30B-A3B", "a 32 GB laptop"),
}


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_the_checker_sets_the_problem_and_refuses_a_changed_one(name, capsys):
    checker = getattr(checks, name)
    assert list(inspect.signature(checker).parameters) == ["answer"], f"{name} takes more than the answer"
    right, changed, how = CHANGED[name]
    assert checker(changed) is False, f"{name} passed the right answer to a changed problem ({how})"
    assert checker(right) is True, capsys.readouterr().out
    with pytest.raises(TypeError):
        checker(changed, 1)  # the problem cannot be passed in any more


def test_memory_needed_sets_its_model_too(capsys):
    assert list(inspect.signature(checks.check_memory_needed).parameters) == ["answer_gb"]
    assert checks.check_memory_needed(0.5) is False  # a 1B model's answer, about: not the 8B of the notebook
    assert "Not yet" in capsys.readouterr().out


def test_the_model_choice_follows_its_problem():
    """The rules, not a fixed name: on a 32 GB laptop the same rules pick another mixture of experts."""
    from labkit.checks.choice import MODEL_CHOICE_PROBLEM, model_choice_verdict

    larger = {**MODEL_CHOICE_PROBLEM, "memory_gb": 32}
    assert model_choice_verdict("Qwen/Qwen3-30B-A3B", **larger)
    assert not model_choice_verdict("openai/gpt-oss-20b", **larger)  # it fits there too, but is smaller
