"""The set-up check of notebook 00: is every package labkit needs installed, in a tested version?

>>> version_problems()
[]
>>> version_problems()  # after `pip install transformers==4.40`
['transformers 4.40.0 is not in the tested range <6,>=5.0']
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, requires, version

from packaging.requirements import Requirement

__all__ = ["version_problems"]


def version_problems(distribution: str = "labkit") -> list[str]:
    """One line per requirement of `distribution` that is missing or outside its tested range.

    Optional extras (requirements with a marker that does not apply here) are skipped.
    """
    needed = [Requirement(line) for line in requires(distribution) or []]
    problems = []
    for requirement in needed:
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        try:
            installed = version(requirement.name)
        except PackageNotFoundError:
            problems.append(f"{requirement.name} is not installed")
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            problems.append(
                f"{requirement.name} {installed} is not in the tested range {requirement.specifier}"
            )
    return problems
