"""Course tooling over the notebooks themselves: worked solutions kept out of sight (solutions.py), the
student copies written without them (student.py), and each slide's height, so a test can hold every
slide to what a projector shows (slides.py). Every tool reads a notebook through notebook_file.py, which
refuses a file that is not one by name. Each module's `__all__` names its doors (tests/doors/cases_course.py)."""
