"""The grades' CSV and one feedback file a student: scores for the instructor, hints for the student.

>>> write_report(results, exercises, strays={}, out=Path("grades"))
PosixPath('grades/grades.csv')
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from labkit.grade.exercises import Exercise

SYMBOLS = {"passed": "✅", "not yet": "❌", "not attempted": "⏳", "not graded": "⚠️", "not handed in": "—"}
# A hint may quote a checker's own case (`with k=3 on the logits [0.1, 2.0, ...]`); the feedback keeps the
# hint and leaves out the numbers of a case the student never saw.
QUOTED_CASE = re.compile(r"(?:tensor\()?\[[\d\s.,eE+\-\[\]]*\d[\d\s.,eE+\-\[\]]*\]\)?")
HIDDEN = "[a case of the checker's own]"
VERDICT_PREFIX = re.compile(r"^(?:✅ Correct|❌ Not yet|⏳ Not attempted yet):\s*")


def feedback_text(message: str) -> str:
    """A checker's words for the feedback: the verdict's prefix and any quoted case's numbers left out.

    >>> feedback_text("❌ Not yet: with k=3 on the logits [0.5, 2.0, -1.0], you keep too many.")
    "with k=3 on the logits [a case of the checker's own], you keep too many."
    """
    lines = [VERDICT_PREFIX.sub("", line) for line in message.strip().splitlines() if line.strip()]
    return QUOTED_CASE.sub(HIDDEN, " ".join(lines))


def graded_notebooks(results: list, exercises: dict[str, list[Exercise]]) -> list[str]:
    """The notebooks graded this time: those any student handed in, in course order."""
    handed_in = {result.notebook for result in results}
    return [name for name in exercises if name in handed_in]


def table(results: list, exercises: dict[str, list[Exercise]], students: list[str]) -> list[dict]:
    """One row a student: 1 or 0 an exercise (an exercise of a notebook not handed in counts 0), a total."""
    columns = [exercise for name in graded_notebooks(results, exercises) for exercise in exercises[name]]
    passed = {(r.student, v.exercise.column) for r in results for v in r.verdicts if v.status == "passed"}
    rows = []
    for student in students:
        row = {"student": student, **{e.column: int((student, e.column) in passed) for e in columns}}
        row["total"], row["out_of"] = sum(row[e.column] for e in columns), len(columns)
        rows.append(row)
    return rows


def feedback(student: str, results: list, exercises: dict[str, list[Exercise]], strays: list[str]) -> str:
    """One student's feedback, in Markdown: per notebook, each exercise's status and hint."""
    mine = {result.notebook: result for result in results if result.student == student}
    lines = [f"# Feedback for {student}", ""]
    for name in graded_notebooks(results, exercises):
        result = mine.get(name)
        passed = sum(v.status == "passed" for v in result.verdicts) if result else 0
        lines += [f"## {name}: {passed} of {len(exercises[name])} exercises pass", ""]
        if result is None:
            lines += ["Not handed in.", ""]
            continue
        if result.stopped:
            lines += [f"Your notebook did not run to the end: {result.stopped}.", ""]
        for verdict in result.verdicts:
            words = feedback_text(verdict.message) if verdict.status != "not graded" else verdict.message
            lines.append(
                f"- {SYMBOLS[verdict.status]} Exercise {verdict.exercise.number} "
                f"(`{verdict.exercise.checker}`): {verdict.status}. {words}".rstrip()
            )
        lines.append("")
    lines += [f"Not a notebook of this course, not graded: {', '.join(strays)}.", ""] if strays else []
    lines.append(
        "Each checker ran its own cases as well as the notebook's; a pass here means all of them passed."
    )
    return "\n".join(lines) + "\n"


def write_report(
    results: list, exercises: dict[str, list[Exercise]], strays: dict[str, list[str]], out: Path
) -> Path:
    """Write out/grades.csv and out/feedback/<student>.md (old feedback files replaced); returns the CSV."""
    students = sorted({result.student for result in results} | set(strays))
    rows = table(results, exercises, students)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "grades.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as file:
        fields = ["student", *[key for key in (rows[0] if rows else {}) if key != "student"]]
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    folder = out / "feedback"
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.md"):
        old.unlink()
    for student in students:
        text = feedback(student, results, exercises, strays.get(student, []))
        (folder / f"{student}.md").write_text(text, encoding="utf-8")
    return csv_path
