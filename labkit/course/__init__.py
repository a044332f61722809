"""Course tooling over the notebooks themselves: worked solutions kept out of sight (solutions.py), the
student copies written without them (student.py), and each slide's height, so a test can hold every
slide to what a projector shows (slides.py)."""
