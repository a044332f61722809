"""Bad-input cases of the class grader (labkit/grade/): folders that are not what it grades, a time limit
that is not one."""

from door import Door

from labkit.grade import grade_class

CASES = [
    Door(
        "labkit.grade.run.grade_class",
        lambda kit: grade_class("no/such/folder", "build/grades"),
        ValueError,
        ("submissions", "one folder a student"),
    ),
    Door(
        "labkit.grade.run.grade_class",
        lambda kit: grade_class("notebooks", "build/grades", course="data"),
        ValueError,
        ("course", "instructor's notebooks"),
    ),
    Door(
        "labkit.grade.run.grade_class",
        lambda kit: grade_class("data", "notebooks"),
        ValueError,
        ("out", "a folder of its own"),
    ),
    Door(
        "labkit.grade.run.grade_class",
        lambda kit: grade_class("data", "build/grades", time_limit_s=0),
        ValueError,
        ("time_limit_s", "positive number of seconds"),
    ),
]

NO_ARGUMENT: dict[str, str] = {}
