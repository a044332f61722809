"""Checking the work, not only the number: a student's function must not call labkit's own answer, a hint
grows with each miss (the idea first, the formula later), and an interpretation is a checked choice.

    >>> from labkit.speculative.rule import expected_tokens_per_step
    >>> run_own(lambda a, g: expected_tokens_per_step(a, g), 0.5, 1, references=[expected_tokens_per_step])[1]
    "it calls labkit's own expected_tokens_per_step: calling labkit's version does not count, write it yourself."
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from types import CodeType

from labkit.checks.common import not_attempted, run_student, verdict
from labkit.run_log import measured

OWN_VERSION = "calling labkit's version does not count, write it yourself."
_misses: dict[str, int] = {}  # exercise -> misses so far in this kernel (progressive hints)


def _code_of(reference: object) -> CodeType | None:
    """The code object that runs when `reference` (a function, method or class with __call__/propose) runs."""
    for candidate in (reference, getattr(reference, "__func__", None), getattr(reference, "__init__", None)):
        code = getattr(candidate, "__code__", None)
        if isinstance(code, CodeType):
            return code
    return None


def _label(reference: object) -> str:
    return getattr(reference, "__qualname__", None) or getattr(reference, "__name__", None) or repr(reference)


def _own_call_miss(reference: object) -> str:
    """The hint for a student's function that reached `reference`: labkit's own answer, or a library's."""
    module = getattr(reference, "__module__", None) or ""
    if module.startswith("labkit"):
        return f"it calls labkit's own {_label(reference)}: {OWN_VERSION}"
    name = _label(reference)
    # a built-in's class (torch's _VariableFunctionsClass): its plain name reads better
    if name.startswith("_"):
        name = getattr(reference, "__name__", name)
    owner = module.split(".")[0] if module else "a library"
    return (
        f"it calls {owner}.{name}, which computes the answer for you: calling a library's version does not "
        "count, write the arithmetic yourself."
    )


def run_own(
    function: Callable, *args, references: Sequence[object] = (), name_args: bool = False
) -> tuple[object, str | None]:
    """Like run_student, and a miss when the call reaches any of `references` (labkit's own answer, or a
    library function that computes it, such as torch.quantize_per_channel), however it was named or
    wrapped: each Python call, and each call of a built-in, is watched while the student's function runs.

        >>> from labkit.speculative.rule import expected_tokens_per_step as mine
        >>> run_own(mine, 0.5, 1, references=[mine])[1].startswith("it calls labkit's own")
        True
    """
    codes = {code: reference for reference in references if (code := _code_of(reference)) is not None}
    builtins = [reference for reference in references if _code_of(reference) is None]
    reached: list[object] = []

    def watch(frame, event, arg):  # noqa: ARG001  sys.setprofile's signature
        if reached:
            return
        if event == "call" and frame.f_code in codes:
            reached.append(codes[frame.f_code])
        elif event == "c_call" and any(arg is builtin for builtin in builtins):
            reached.append(arg)

    previous = sys.getprofile()
    sys.setprofile(watch if references else previous)
    try:
        result, error = run_student(function, *args, name_args=name_args)
    finally:
        sys.setprofile(previous)
    if reached:
        return None, _own_call_miss(reached[0])
    return result, error


def progressive(exercise: str, hints: Sequence[str]) -> str:
    """The next hint for `exercise`: the first miss gets hints[0] (the idea), later misses the later ones
    (the last, most explicit, repeats). A pass resets it (see `reset`).

        >>> reset("demo"); progressive("demo", ["think of X.", "X = a / b."]); progressive("demo", ["think of X.", "X = a / b."])
        'think of X.'
        'X = a / b.'
    """
    count = _misses.get(exercise, 0)
    _misses[exercise] = count + 1
    return hints[min(count, len(hints) - 1)]


def reset(exercise: str) -> None:
    """Forget the misses of `exercise` (after a pass, or in a test)."""
    _misses.pop(exercise, None)


def reset_all() -> None:
    """Forget every exercise's misses (a fresh kernel, or a test that must start at the first hint)."""
    _misses.clear()


def choice_miss(answer: object, choices: dict[str, str], expected: str, hint: str) -> str | None:
    """None when `answer` is `expected` among `choices` ({name: what it means}); the list of choices when it
    is none of them; else "<answer> does not fit your measurement: <hint>" (never naming the right one).

        >>> choice_miss("bytes", {"bytes": "reading weights", "overhead": "per-op cost"}, "overhead", "look again.")
        "'bytes' does not fit your measurement: look again."
    """
    if answer == expected:
        return None
    if answer not in choices:
        listed = "; ".join(f"{name!r} ({meaning})" for name, meaning in choices.items())
        return f"choose one of {listed}, not {answer!r}."
    return f"{answer!r} does not fit your measurement: {hint}"


def choice_verdict(
    answer: object,
    choices: dict[str, str],
    expected: str,
    hint: str,
    *,
    name: str,
    exercise: str,
    right_so_far: str,
    passed: str,
) -> bool:
    """The verdict on an interpretation asked after a number the student got right: not attempted while
    `answer` is None; choice_miss's message on a miss (never naming the right one); else a pass saying
    `passed`, and `exercise`'s hints start over.

        >>> choice_verdict("memory", {"memory": "reading weights", "other": "anything else"}, "other",
        ...                "compare with the read bandwidth.", name="limited_by", exercise="weight_traffic",
        ...                right_so_far="your GB/s is right", passed="12 GB/s.")
        ❌ Not yet: your GB/s is right; 'memory' does not fit your measurement: compare with the read bandwidth.
        False
    """
    if answer is None:
        return not_attempted(f"{name}, one of {sorted(choices)} ({right_so_far})")
    miss = choice_miss(answer, choices, expected, hint)
    if miss:
        return verdict(False, f"{right_so_far}; {miss}")
    reset(exercise)
    return verdict(True, passed)


def _all_measured(value: object) -> bool:
    """measured(value), or of every item of a list, tuple or dict's values (a series of step times)."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return bool(value) and all(measured(item) for item in value)
    return measured(value)


def refuse_unmeasured(what: str, **values: object) -> bool | None:
    """False, with a hint printed, when any of `values` (name=value) is not what labkit measured in this
    kernel (labkit.run_log): a number typed in, copied from the saved notebook or rounded, or a result object
    built by hand; None otherwise. `what` says how the notebook measures them.

        >>> refuse_unmeasured("time the loops with seconds(...)", seconds_with_cache=2.0)
        ❌ Not yet: seconds_with_cache was not measured in this kernel (...): time the loops with seconds(...)
        False
    """
    typed = [name for name, value in values.items() if not _all_measured(value)]
    if not typed:
        return None
    return verdict(
        False,
        f"{', '.join(typed)} {'was' if len(typed) == 1 else 'were'} not measured in this kernel (labkit keeps "
        "what it measured: each number to the last digit, each result as the object it returned; a typed, "
        f"copied or rounded number, or a result built by hand, is not there): {what}, and pass what it returns.",
    )


def refuse_changed_problem(*, problem: str = "", **parts: tuple[object, object]) -> bool | None:
    """False, with a hint, when a part of the problem the call passes differs from the exercise's own
    (name=(given, the exercise's)): the right answer to a changed problem counts for nothing; None otherwise.
    `problem`, when given, says what the exercise's own problem is.

        >>> refuse_changed_problem(text=("", "The weather in Zürich is lovely today"))
        ❌ Not yet: text is not the exercise's own: ...
        False
    """
    changed = [name for name, (given, own) in parts.items() if given != own]
    if not changed:
        return None
    own = f" The exercise's own problem is {problem}." if problem else ""
    verb = "is" if len(changed) == 1 else "are"
    return verdict(
        False,
        f"{', '.join(changed)} {verb} not the exercise's own: the right answer to a changed problem counts for "
        f"nothing.{own} Run the exercise's cell as it was given, and answer that.",
    )


# The model notebooks 00 and 03 set their exercises on, known by its architecture (its config.json).
EXERCISE_MODEL = "SmolLM2-135M as loaded at the top of the notebook"
SMOLLM2_135M = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "layers": 30,
    "heads": 9,
    "kv_heads": 3,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
}
_FIELDS = {  # a part named otherwise in a config: its field in labkit's LlamaConfig, then in transformers'
    "layers": ("n_layers", "num_hidden_layers"),
    "heads": ("n_heads", "num_attention_heads"),
    "kv_heads": ("n_kv_heads", "num_key_value_heads"),
}


def architecture(model: object) -> dict[str, object]:
    """The parts of SMOLLM2_135M read off labkit's Llama (its LlamaConfig) or a transformers model (its
    config); None for a part a model does not have.

        >>> architecture(labkit.tiny_model())["hidden_size"]
        64
    """
    config = getattr(model, "config", None)
    return {
        part: next((getattr(config, f) for f in _FIELDS.get(part, (part,)) if hasattr(config, f)), None)
        for part in SMOLLM2_135M
    }


def refuse_other_model(
    model: object, *, dtype: object = None, problem: str = EXERCISE_MODEL, **parts: tuple[object, object]
) -> bool | None:
    """refuse_changed_problem for an exercise set on SmolLM2-135M: False, with a hint, when `model` is
    another model (by its architecture: a tiny one's right answer is no answer), when its weights are not
    all in `dtype` (given only where the answer depends on it), or when one of `parts` differs; else None.

        >>> refuse_other_model(labkit.tiny_model())
        ❌ Not yet: model is not the exercise's own: ... SmolLM2-135M as loaded at the top of the notebook. ...
        False
    """
    parts = {"model": (architecture(model), SMOLLM2_135M), **parts}
    if dtype is not None:
        weights = getattr(model, "parameters", None)
        parts["dtype"] = ({p.dtype for p in weights()} if callable(weights) else set(), {dtype})
        problem += f", its weights in {str(dtype).removeprefix('torch.')}"
    return refuse_changed_problem(problem=problem, **parts)
