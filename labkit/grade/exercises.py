"""A course notebook's exercises, as the grader runs them: each checker call exactly as the instructor's
notebook writes it, with its problem (the arguments the instructor set), never as a student's copy has it.

    >>> [exercise.checker for exercise in course_exercises("notebooks/06_kv_cache.ipynb")][:1]
    ['check_kv_cache_bytes']
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

from labkit.course.solutions import SOLUTION_TAG, tags, text

PLACEHOLDER = "# your"  # `answer = None  # your code here`, `# your answer`, `return None  # your code`


@dataclass(frozen=True)
class Exercise:
    """One graded exercise of a notebook."""

    notebook: str  # the course notebook's file name, e.g. "06_kv_cache.ipynb"
    checker: str  # the checker's name, e.g. "check_kv_cache_bytes"
    call: str  # the call the grader evaluates, e.g. 'checks.check_kv_cache_bytes(kv_bytes)'
    number: int  # its place among the notebook's exercises, from 1

    @property
    def column(self) -> str:
        """Its column in the grades' CSV, e.g. '06.1 check_kv_cache_bytes' (a checker may grade two answers)."""
        return f"{self.notebook[:2]}.{self.number} {self.checker}"


def checker_calls(source: str) -> list[tuple[str, str]]:
    """(checker name, call as source) for each `check_...(...)` call in a cell, in order.

    >>> checker_calls("x = None\\npassed = checks.check_top_k_filter(x)")
    [('check_top_k_filter', 'checks.check_top_k_filter(x)')]
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # a cell of IPython magics; the course's checker cells are plain Python
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name.startswith("check_"):
                calls.append((node.lineno, node.col_offset, name, ast.unparse(node)))
    return [(name, call) for _, _, name, call in sorted(calls)]


def course_exercises(path: str | Path) -> list[Exercise]:
    """The exercises of an instructor's notebook: every checker call in a cell the student fills in (one that
    holds a `# your ...` placeholder), outside the worked solutions; a checker run on the notebook's own
    buggy version, to show it failing, is no exercise."""
    path = Path(path)
    notebook = json.loads(path.read_text(encoding="utf-8"))
    calls = [
        found
        for cell in notebook["cells"]
        if cell["cell_type"] == "code" and SOLUTION_TAG not in tags(cell) and PLACEHOLDER in text(cell)
        for found in checker_calls(text(cell))
    ]
    return [Exercise(path.name, name, call, number) for number, (name, call) in enumerate(calls, start=1)]
