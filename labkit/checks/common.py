"""What every checker says: a pass or a hint, and "not attempted yet" for an empty answer.

    >>> verdict(True, "one step of beam search.")
    ✅ Correct: one step of beam search.
    True
"""

from __future__ import annotations


def verdict(passed: bool, message: str) -> bool:
    """Print a pass or a hint, and return whether it passed."""
    print(("✅ Correct: " if passed else "❌ Not yet: ") + message)
    return passed


def not_attempted(what: str) -> bool:
    """Say the exercise still holds its placeholder; counts as not passed."""
    print(f"⏳ Not attempted yet: replace None with {what}.")
    return False
