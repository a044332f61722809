"""Every public name of labkit (public_names.py: the flat API, each folder's __all__, and what the notebooks
import or call, the exercise checkers left out) has a bad-input case: a row in its folder's table
(tests/doors/cases_<folder>.py), a registry of an older bad-input test (cases.REUSED), or a line in the
table's NO_ARGUMENT with the reason it needs none. A newly exported name without one fails here."""

from cases import CASES, NO_ARGUMENT, REUSED, holds, registry
from public_names import public_names, resolve


def table_of(name: str) -> str:
    """The case table a name's case goes in."""
    folder = name.split(".")[1]
    return f"tests/doors/cases_{folder if name.count('.') >= 3 else 'top'}.py"


def test_every_public_name_has_a_bad_input_case():
    covered = {case.name for case in CASES} | set(NO_ARGUMENT) | set(REUSED)
    lacking = [
        f"{name} (from {source}): add a case to {table_of(name)}'s CASES, e.g. wrong({name!r}, "
        f"words=('<argument>',)), or put it in NO_ARGUMENT with the reason it needs none"
        for name, source in sorted(public_names().items())
        if name not in covered
    ]
    assert not lacking, f"{len(lacking)} public name(s) without a bad-input case:\n" + "\n".join(lacking)


def test_every_reused_registry_holds_its_function():
    loaded = {reference: registry(reference) for reference in set(REUSED.values())}
    wrong = [
        f"{name}: not in {reference}"
        for name, reference in REUSED.items()
        if not holds(loaded[reference], resolve(name))
    ]
    assert not wrong, wrong


def test_every_case_names_a_labkit_function_or_class():
    for name in {case.name for case in CASES} | {
        name for name, why in NO_ARGUMENT.items() if "constant" not in why
    }:
        assert callable(resolve(name)), name


def test_no_argument_entries_give_their_reason():
    vague = [name for name, why in NO_ARGUMENT.items() if len(why.split()) < 3]
    assert not vague, f"say why each of these needs no bad-input case: {vague}"


def test_public_names_include_every_folder_export_and_notebook_import():
    names = public_names()
    assert names["labkit.decoding.generate.generate"] == "labkit.__all__"
    assert names["labkit.engines.install.engines_dir"] == "labkit.engines.__all__"
    assert names["labkit.core.inspect_forward.trace_forward"].startswith("notebooks/")
    assert not [name for name in names if name.startswith("labkit.checks")]
