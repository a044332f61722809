"""Bad-input cases of the course tools (labkit/course/): a tool that writes files refuses to write over its
own sources. Not public names (no notebook imports them), but the doors `make student` and `make site` use."""

from door import Door

from labkit.course.site import build_site
from labkit.course.student import write_student_copies

NOTEBOOK = "notebooks/00_setup_and_tour.ipynb"

CASES = [
    Door(
        "labkit.course.student.write_student_copies",
        lambda kit: write_student_copies([NOTEBOOK], "notebooks"),
        ValueError,
        ("out_dir", "holds the notebooks the copies are made from"),
    ),
    Door(
        "labkit.course.site.build_site",
        lambda kit: build_site([NOTEBOOK], "notebooks"),
        ValueError,
        ("out_dir 'notebooks'", "holds its sources"),
    ),
    Door(
        "labkit.course.site.build_site",
        lambda kit: build_site([NOTEBOOK], "."),
        ValueError,
        ("out_dir '.'", "holds its sources"),
    ),
    Door(
        "labkit.course.site.build_site",
        lambda kit: build_site([NOTEBOOK], "build/x", source_dir="notebooks/.."),
        ValueError,
        ("source_dir",),
    ),
]

NO_ARGUMENT: dict[str, str] = {}
