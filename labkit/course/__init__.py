"""Course tooling over the notebooks themselves: worked solutions kept out of sight (solutions.py) and
the student copies written without them (student.py)."""
