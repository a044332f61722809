"""Prose stays true: every number a notebook's prose states as a result is printed in that notebook's
saved outputs, so re-executing the notebooks cannot silently break a sentence. Only the notebooks'
JSON and data/prose_numbers/ are read: nothing runs, no model loads.

What is checked. Every markdown cell is prose: lessons, instructor notes (slide type `notes`) and
worked-solution text alike. A prose number is a number written
- with a decimal point (18.6), or with thousands separators (134,515,008), or
- with a unit: %, a ratio (3.4x, 3.4×, not "576 x 1,536"), ms, us, µs, ns, s, seconds, minutes, bytes,
  KB ... TB (and KiB ... GiB), MB/s, GB/s, TB/s, tokens/s, tok/s, "tokens per second", GFLOP/s,
  TFLOP/s, bits. In a range ("15-50 s", "80-90 %") both ends carry the unit.

A prose number passes when one of these holds:
1. It is printed in the notebook's saved outputs (stream text, text/plain, text/markdown): some printed
   number rounds to it at the prose's own precision (prose 18.6 accepts a printed 18.63; prose 19 with
   a unit accepts 18.6). Thousands separators and units do not matter, nor does a sign (prose says
   "drops by 0.3" where the output prints -0.3).
2. It is listed in data/prose_numbers/NOTEBOOK.toml for that notebook as
   - `derived`: an arithmetic expression (`expr`) whose result rounds to it, over numbers that are
     printed (rule 1, each at its own written precision), powers of ten (unit conversions), or named in
     the entry's `given` with what each one is (bytes per float32 weight, a config value). The result
     must round to the prose number at its written precision, or to the entry's `to_nearest` where the
     prose rounds further ("about 1,700" is 1,656 `to_nearest` 100);
   - `fact`: a number from outside the run (an H100's 3.35 TB/s, a paper's figure, a model's config)
     with its `source`. A fact is only required to be listed.
   Every listed number must still occur in that notebook's prose: a stale entry fails.
3. It is not a result, by one of these narrow rules:
   - code: inside `inline code` or a fenced block;
   - names: digits joined to a name (SmolLM2-135M, Q4_1, Llama-3.1-8B, x86);
   - section numbers: a heading's leading number, and a number right after §, "section", "notebook",
     "Exercise" or "step";
   - the stated session time at the top ("⏱️ About **60 minutes**"), which
     tests/course/test_session_times.py checks against the slides it counts;
   - a guess: the number(s) right after "guess is" or "guess of" (what a student might predict);
   - a setting: a number that appears as a literal in one of the notebook's code cells (a 256-token
     prompt, top_p 0.9), compared by value.
   Bare integers (30 layers, 576 hidden, 2023 in "Kwon et al. 2023", 60 tokens) are not prose numbers
   at all: they count things or name them, and the ones that are results (a count of tokens) are
   printed beside their sentence.
A failure names the notebook, the cell id, the sentence and the number.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
LISTED = ROOT / "data" / "prose_numbers"  # one NN_name.toml per notebook

UNIT = (
    r"(?:GB/s|TB/s|MB/s|tokens?/s|tok/s|tokens per second|GFLOP/s|TFLOP/s|ms|us|µs|μs|ns|seconds?|"
    r"minutes?|s|[KMGT]i?B|bytes?|bits?|%|(?:x|×)(?!\s*\d))"
)
VALUE = r"\d{1,3}(?:,\d{3})+(?!\d|,\d)|\d+(?:\.\d+)?"
NUMBER = re.compile(rf"(?<![\w.,])(?<![A-Za-z]-)({VALUE})(?:\s?({UNIT}))?(?!\w)(?![.,]\d)")
RANGE = re.compile(rf"({VALUE})\s?(?:-|–|to)\s?(?:{VALUE})\s?({UNIT})(?!\w)")
PRINTED = re.compile(r"\d{1,3}(?:,\d{3})+(?!\d)|\d+(?:\.\d+)?(?:e[-+]?\d+)?")
CODE_LITERAL = re.compile(r"(?<![\w.])\d[\d_]*(?:\.\d+)?(?:e[-+]?\d+)?")
NOT_RESULTS = [  # spans blanked before numbers are read; each is a rule of the docstring
    re.compile(r"```.*?```", re.DOTALL),  # code
    re.compile(r"`[^`\n]*`"),  # code
    re.compile(r"^#+\s*[\d.]+", re.MULTILINE),  # a heading's section number
    re.compile(r"(?:§\s*|\b(?:[Ss]ection|[Nn]otebooks?|[Ee]xercise|[Ss]tep)s? )\d+(?:\.\d+)*"),  # references
    re.compile(r"(?:⏱️|\*\*Time:?\*\*:?)\s*about\s*\**\d+\s*minutes", re.IGNORECASE),  # the session time
    re.compile(rf"guess (?:is|of) (?:about |around )?(?:{VALUE})(?:\s?(?:-|–|to)\s?(?:{VALUE}))?"),  # a guess
]
OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
}


@dataclass(frozen=True)
class ProseNumber:
    """One number in a notebook's prose, with where it stands."""

    text: str  # as written, without its unit: "134,515,008"
    unit: str  # "" when it has none
    cell: str  # the markdown cell's id
    sentence: str  # the sentence around it, for the failure message

    @property
    def value(self) -> Decimal:
        return Decimal(self.text.replace(",", ""))


def source(cell: dict) -> str:
    return "".join(cell["source"])


def output_text(cell: dict) -> str:
    """The text a code cell printed: stream text, text/plain and text/markdown."""
    parts = []
    for output in cell.get("outputs", []):
        parts.append("".join(output.get("text", "")))
        data = output.get("data", {})
        parts += ["".join(data.get(kind, "")) for kind in ("text/plain", "text/markdown")]
    return "\n".join(parts)


def blank(text: str) -> str:
    """The prose with every span that a rule says holds no result replaced by spaces (offsets kept)."""
    for rule in NOT_RESULTS:
        text = rule.sub(lambda match: " " * len(match.group()), text)
    return text


def sentence_at(text: str, start: int, end: int) -> str:
    """The sentence around text[start:end], on one line."""
    left = max(text.rfind(". ", 0, start), text.rfind("\n\n", 0, start), text.rfind("\n- ", 0, start))
    right = min((i for i in (text.find(". ", end), text.find("\n\n", end)) if i >= 0), default=len(text))
    return " ".join(text[left + 1 : right + 1].split())


def numbers_in(text: str, cell: str = "") -> list[ProseNumber]:
    """The prose numbers of one markdown text (see the module docstring for what counts).

    >>> [n.text + n.unit for n in numbers_in("30 layers ran 18.6x faster in 15-50 s, see `x = 2.5`")]
    ['18.6x', '15s', '50s']
    """
    kept = blank(text)
    range_units = {match.start(1): match.group(2) for match in RANGE.finditer(kept)}
    found = []
    for match in NUMBER.finditer(kept):
        written, unit = match.group(1), match.group(2) or range_units.get(match.start(1), "")
        if "." in written or "," in written or unit:
            found.append(ProseNumber(written, unit, cell, sentence_at(text, match.start(), match.end())))
    return found


def prose_numbers(notebook: dict) -> list[ProseNumber]:
    """Every prose number of every markdown cell, in order."""
    return [
        number
        for cell in notebook["cells"]
        if cell["cell_type"] == "markdown"
        for number in numbers_in(source(cell), cell.get("id", "?"))
    ]


def printed_numbers(notebook: dict) -> list[Decimal]:
    """Every number the notebook's saved outputs print, as absolute values."""
    text = "\n".join(output_text(cell) for cell in notebook["cells"] if cell["cell_type"] == "code")
    return [Decimal(found.replace(",", "")) for found in PRINTED.findall(text)]


def code_literals(notebook: dict) -> set[Decimal]:
    """The numeric literals written in the notebook's code cells (the settings the code makes)."""
    text = "\n".join(source(cell) for cell in notebook["cells"] if cell["cell_type"] == "code")
    return {Decimal(found.replace("_", "")) for found in CODE_LITERAL.findall(text)}


def half_step(written: str) -> Decimal:
    """Half a unit in the last written place: how far a value may be from what rounds to `written`."""
    exponent = Decimal(written.replace(",", "")).as_tuple().exponent
    return Decimal(5).scaleb(exponent - 1)


def is_printed(written: str, printed: list[Decimal]) -> bool:
    """Whether some printed number rounds to `written` at its written precision."""
    value, tolerance = abs(Decimal(written.replace(",", ""))), half_step(written)
    return any(abs(number - value) <= tolerance for number in printed)


def is_power_of_ten(value: float) -> bool:
    return value > 0 and Decimal(repr(value)).normalize().as_tuple().digits == (1,)


def evaluate(node: ast.AST) -> float:
    """The value of an expression made of numbers, + - * / ** and parentheses."""
    if isinstance(node, ast.Expression):
        return evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](evaluate(node.operand))
    raise ValueError(f"not arithmetic: {ast.dump(node)}")


def derivation_problems(entry: dict, printed: list[Decimal]) -> list[str]:
    """What is wrong with one `derived` entry: an unprinted, ungiven operand, or a result that does not
    round to the prose number."""
    expression, given = entry["expr"], entry.get("given", {})
    tree = ast.parse(expression, mode="eval")
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            written = ast.get_source_segment(expression, node)
            if not (written in given or is_power_of_ten(node.value) or is_printed(written, printed)):
                problems.append(
                    f"{entry['number']} = {expression}: operand {written} is not printed; "
                    "list it under `given` with what it is"
                )
    result = Decimal(repr(evaluate(tree)))
    tolerance = Decimal(entry["to_nearest"]) / 2 if "to_nearest" in entry else half_step(entry["number"])
    if abs(result - Decimal(entry["number"].replace(",", ""))) > tolerance * Decimal("1.000001"):
        problems.append(
            f"{entry['number']} = {expression} gives {float(result):.6g}, which does not round to it"
        )
    return problems


def listed_for(stem: str, listed: dict) -> tuple[list[dict], list[dict]]:
    """The `derived` and `fact` entries of one notebook."""
    entries = listed.get(stem, {})
    return entries.get("derived", []), entries.get("fact", [])


def unsupported(notebook: dict, derived: list[dict], facts: list[dict]) -> list[ProseNumber]:
    """The prose numbers that are neither printed, nor listed, nor a setting the code makes."""
    printed, settings = printed_numbers(notebook), code_literals(notebook)
    listed = {Decimal(entry["number"].replace(",", "")) for entry in derived + facts}
    return [
        number
        for number in prose_numbers(notebook)
        if not is_printed(number.text, printed) and number.value not in listed | settings
    ]


def report(name: str, numbers: list[ProseNumber]) -> str:
    return "\n".join(f"{name} cell {n.cell}: {n.text}{n.unit!s} in: {n.sentence}" for n in numbers)


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


# --- the course's notebooks --------------------------------------------------------------------------

LISTED_NUMBERS = {
    name: table
    for path in sorted(LISTED.glob("*.toml"))
    for name, table in tomllib.loads(path.read_text(encoding="utf-8")).items()
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_prose_number_is_printed_or_derived(path):
    missing = unsupported(load(path), *listed_for(path.stem, LISTED_NUMBERS))
    assert not missing, (
        "prose numbers found in no saved output: correct the sentence, or list the number in "
        f"{LISTED.relative_to(ROOT)}/{path.stem}.toml with its derivation or source:\n"
        + report(path.name, missing)
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_listed_numbers_follow_from_outputs_and_still_stand_in_the_prose(path):
    notebook = load(path)
    derived, facts = listed_for(path.stem, LISTED_NUMBERS)
    printed, written = printed_numbers(notebook), {number.value for number in prose_numbers(notebook)}
    problems = [problem for entry in derived for problem in derivation_problems(entry, printed)]
    problems += [
        f"fact {entry['number']} has no source" for entry in facts if not entry.get("source", "").strip()
    ]
    problems += [
        f"{entry['number']} is listed but no longer in the prose"
        for entry in derived + facts
        if Decimal(entry["number"].replace(",", "")) not in written
    ]
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_every_listed_notebook_exists():
    assert set(LISTED_NUMBERS) <= {path.stem for path in NOTEBOOKS}
    for path in LISTED.glob("*.toml"):  # each file lists its own notebook's numbers only
        assert set(tomllib.loads(path.read_text(encoding="utf-8"))) <= {path.stem}, path.name


# --- the check itself ----------------------------------------------------------------------------------


def demo_notebook(prose: str, printed: str, code: str = "print(result)") -> dict:
    return {
        "cells": [
            {"cell_type": "markdown", "id": "lesson-1", "metadata": {}, "source": prose},
            {
                "cell_type": "code",
                "id": "code-1",
                "metadata": {},
                "source": code,
                "outputs": [{"output_type": "stream", "name": "stdout", "text": printed}],
            },
        ]
    }


def test_a_wrong_prose_number_fails_with_notebook_cell_sentence_and_number():
    notebook = demo_notebook(
        "Intro.\n\nThe cached loop ran 18.9x faster. That is all.", "cached 0.52 s, uncached 9.67 s: 18.6x\n"
    )
    missing = unsupported(notebook, [], [])
    assert [(n.text, n.unit, n.cell) for n in missing] == [("18.9", "x", "lesson-1")]
    assert (
        report("99_demo.ipynb", missing)
        == "99_demo.ipynb cell lesson-1: 18.9x in: The cached loop ran 18.9x faster."
    )


def test_printed_numbers_match_at_the_prose_precision_with_separators_and_units():
    notebook = demo_notebook(
        "It ran 18.6x faster, in 9.7 s, at 10 % of 134,515,008 weights and 0.3 ms less.",
        "18.63x in 9.67 s; 10.4 %; 134515008 weights; delta -0.3 ms\n",
    )
    assert unsupported(notebook, [], []) == []
    assert [n.text for n in unsupported(demo_notebook("It took 9.61 s.", "9.67 s\n"), [], [])] == ["9.61"]


def test_rules_leave_out_code_names_sections_times_guesses_and_settings():
    prose = (
        "## 2.1 Setup\n\n⏱️ About **60 minutes**. SmolLM2-135M in Q4_1 has 30 layers (Kwon et al. 2023); "
        "see §8.3 and section 4.2. Run `top_p=0.95`. A common guess is 80-90 %. The prompt has 1,024 tokens."
    )
    assert unsupported(demo_notebook(prose, "nothing\n", code="generate(prompt_tokens=1024)"), [], []) == []


def test_a_derivation_must_use_printed_operands_and_round_to_the_prose_number():
    printed = printed_numbers(demo_notebook("", "65 tokens against 23 tokens\n"))
    assert derivation_problems({"number": "2.8", "expr": "65 / 23"}, printed) == []
    assert derivation_problems({"number": "2.9", "expr": "65 / 23"}, printed) == [
        "2.9 = 65 / 23 gives 2.82609, which does not round to it"
    ]
    assert len(derivation_problems({"number": "2.8", "expr": "64.9 / 23"}, printed)) == 1
    given = {"number": "260", "expr": "65 * 4 * 1000 / 1e3", "given": {"4": "bytes per float32 weight"}}
    assert derivation_problems(given, printed) == []
    assert (
        derivation_problems(
            {
                "number": "1,700",
                "expr": "16 * 65 + 650",
                "to_nearest": "100",
                "given": {"16": "new tokens", "650": "a sum"},
            },
            printed,
        )
        == []
    )


def test_listed_numbers_excuse_only_their_own_value():
    notebook = demo_notebook("An H100 reads 3.35 TB/s; ours read 6.5 GB/s.", "12.0 tokens per second\n")
    facts = [{"number": "3.35", "source": "NVIDIA H100 SXM datasheet"}]
    assert [n.text for n in unsupported(notebook, [], facts)] == ["6.5"]
