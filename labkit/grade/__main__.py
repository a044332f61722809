"""`python -m labkit.grade SUBMISSIONS_DIR`: grade a class's notebooks (see labkit.grade)."""

import argparse

from labkit.grade.run import grade_class


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m labkit.grade",
        description="Grade a class's notebooks: SUBMISSIONS_DIR holds one folder a student, each with the course "
        "notebooks that student hands in. Writes OUT/grades.csv and OUT/feedback/<student>.md.",
    )
    parser.add_argument("submissions", help="the folder of the students' folders")
    parser.add_argument(
        "--course", default="notebooks", help="the instructor's notebooks (default: notebooks)"
    )
    parser.add_argument("--out", default="grades", help="where to write the grades (default: grades)")
    parser.add_argument(
        "--time-limit", type=float, default=1200.0, help="seconds a notebook may run (default: 1200)"
    )
    arguments = parser.parse_args()
    print(
        f"wrote {grade_class(arguments.submissions, arguments.out, arguments.course, arguments.time_limit)}"
    )


if __name__ == "__main__":
    main()
