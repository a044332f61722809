"""One bad-input case of a public door: a qualified name, a bad call, the error it must raise and words its
message must contain. The cases live in one table per labkit folder (cases_<folder>.py); the tests in
test_doors.py run them, and test_every_door_has_a_case.py checks that every public name has one.

`call` takes a Kit, which hands out the tiny model and SmolLM2's tokenizer only to the cases that ask.
`every_argument_wrong(function)` is the bad call most cases share: each required argument a plain
object(), which the door must refuse by naming one of them. A case whose door is missing (the call
crashes deep inside, or accepts anything) says where in `missing`: its test is an xfail(strict=True), so
the day the door is added the test fails until `missing` is removed.

    >>> Door("labkit.decoding.sampling.greedy", lambda kit: greedy([1, 2]), TypeError, ("logits",))
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from public_names import resolve


class Kit:
    """What a bad call may need, made on first use: `kit.tiny` (labkit's 2-layer random Llama),
    `kit.tokenizer` (SmolLM2's, no weights read) and `kit.tmp_path` (an empty folder of the test's own),
    from the suite's fixtures."""

    def __init__(self, request: pytest.FixtureRequest):
        self.request = request

    @property
    def tiny(self):
        return self.request.getfixturevalue("tiny")

    @property
    def tokenizer(self):
        return self.request.getfixturevalue("tokenizer")

    @property
    def tmp_path(self):
        return self.request.getfixturevalue("tmp_path")


class Wrong:
    """A value no door accepts: not a number, text, tensor, model or list."""

    def __repr__(self) -> str:
        return "<wrong>"


def required(function: Callable) -> list[str]:
    """The names of function's arguments that have no default (self and cls left out)."""
    kinds = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )
    return [
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.default is p.empty and p.kind in kinds and p.name not in ("self", "cls")
    ]


def every_argument_wrong(name: str) -> Callable[[Kit], object]:
    """The bad call of `name` (a qualified name) with a Wrong() for each of its required arguments."""

    def call(kit: Kit) -> object:
        function = resolve(name)
        result = function(**{argument: Wrong() for argument in required(function)})
        if inspect.iscoroutine(result):
            result.close()
        return next(result) if inspect.isgenerator(result) else result

    return call


@dataclass(frozen=True)
class Door:
    """One bad call of a public name, and the clear error it must raise."""

    name: str  # where the function or class is defined: labkit.decoding.generate.generate
    call: Callable[[Kit], object]  # the bad call
    error: type[BaseException] | tuple[type[BaseException], ...]  # ValueError, TypeError or a labkit error
    words: tuple[str, ...]  # what the message must contain: the argument's name, what is allowed
    missing: str = ""  # where the call crashes today, if the door is missing ("" when it is there)
    slow: bool = False  # the call loads a real model


def wrong(name: str, error=(TypeError, ValueError), words: tuple[str, ...] = (), missing: str = "") -> Door:
    """The shared case: every required argument of `name` a Wrong(); the message names `words`."""
    return Door(name, every_argument_wrong(name), error, words, missing)
