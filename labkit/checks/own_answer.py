"""An answer computed by labkit's own function does not count, even when it is a number or a string.

A function exercise is watched while it runs (labkit.checks.work.run_own); a value cannot be, so its source
is read instead: in the kernel's input history (IPython's `In`, which holds the cell running now too), the
latest cell that calls the exercise's checker names the student's answer as its first argument, and the
latest assignment to that name, in that cell or before it, must not call the exercise's reference (say,
`shape.kv_cache_bytes(...)`). The grader (labkit.grade) runs the student's cells in a kernel too, so it
reads the same history. Outside IPython there is no history, and nothing is refused.

    >>> answer_computed_by("check_kv_cache_bytes", ["kv_cache_bytes"])  # in a notebook, after
    ...                                         # kv_bytes = model_shape("smollm2-135m").kv_cache_bytes(4096, 8)
    'kv_cache_bytes'
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from labkit.checks.common import verdict
from labkit.checks.work import OWN_VERSION


def input_history() -> list[str]:
    """The sources of the cells this kernel has run, the running one last; [] outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:  # labkit runs without IPython too (scripts, tests)
        return []
    shell = get_ipython()
    return [] if shell is None else list(shell.user_ns.get("In", []))


def parsed(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:  # a cell of IPython magics
        return None


def answer_name(tree: ast.Module, checker: str) -> str | None:
    """The name passed first to `checker` in a cell (`checks.check_x(kv_bytes)` -> "kv_bytes"), else None."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called == checker:
                return node.args[0].id
    return None


def called_names(node: ast.AST) -> set[str]:
    """The names of the functions and methods called anywhere in `node`."""
    return {
        call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id
        for call in ast.walk(node)
        if isinstance(call, ast.Call) and isinstance(call.func, (ast.Attribute, ast.Name))
    }


def answer_computed_by(checker: str, references: Sequence[str]) -> str | None:
    """The first of `references` that the student's latest assignment of their answer calls, else None."""
    trees = [tree for tree in map(parsed, input_history()) if tree is not None]
    for index in range(len(trees) - 1, -1, -1):
        name = answer_name(trees[index], checker)
        if name is None:
            continue
        for tree in reversed(trees[: index + 1]):
            assignments = [
                node
                for node in ast.walk(tree)
                if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets)
            ]
            if assignments:
                calls = called_names(max(assignments, key=lambda node: node.lineno).value)
                return next((reference for reference in references if reference in calls), None)
        return None
    return None


def refuse_own_answer(answer: object, checker: str, references: Sequence[str]) -> bool | None:
    """False, with the verdict printed, when the answer was computed by one of `references`; None otherwise
    (go on checking; also when there is no answer yet)."""
    own = None if answer is None else answer_computed_by(checker, references)
    if own is None:
        return None
    return verdict(False, f"your answer is computed by labkit's own {own}: {OWN_VERSION}")
