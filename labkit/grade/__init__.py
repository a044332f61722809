"""A grader for a class: `python -m labkit.grade SUBMISSIONS_DIR` runs every exercise's checker on every
student's notebooks and writes a CSV of scores and one feedback file a student.

Submissions are laid out one folder a student, each holding the notebooks that student hands in, under their
course names (`SUBMISSIONS_DIR/ada/06_kv_cache.ipynb`). Each notebook is graded alone:
- copied into a temporary folder of its own, the working directory of a fresh kernel (a notebook that
  deletes files deletes only its copy), and run top to bottom in a child process with a time limit (a cell
  that hangs is interrupted, a child that still does not end is killed);
- then each exercise's checker runs as the instructor's notebook calls it (labkit.grade.exercises): the
  problem the instructor set, not the one a student's cell may have changed, on the names the student's run
  defined; a checker's own cases, which the notebook never shows, run inside it as they do for the student.
The CSV holds 1 or 0 an exercise and each student's total; the feedback says, per exercise, passed, not yet
(with the checker's hint, never the expected value, and any list of numbers a hint quotes from a hidden case
left out), not attempted, or why it could not be graded. A grade is only ever given after every case ran: no
student is told "all tests passed" while hidden ones remain (otter-grader's public/hidden split does that).
A rerun grades the same: nothing depends on the order or the time of the runs, except a time limit.

Why not nbgrader or otter-grader: both grade with tests written beside each question; here the checkers
already are those tests, with hints, and a notebook's exercise is the checker call its cell makes.

    >>> grade_class("submissions", "grades")  # grades/grades.csv, grades/feedback/<student>.md
    $ python -m labkit.grade submissions --out grades --time-limit 900
"""

from labkit.grade.run import grade_class

__all__ = ["grade_class"]
