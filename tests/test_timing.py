"""labkit.timing's quick-run switch: `make test` times fewer repeats in the notebook cells whose outputs nbval
does not compare, says so in the cell's output, and a full run (`make notebooks`, JupyterLab) is unchanged."""

import json
import re
from pathlib import Path

import pytest

from labkit.timing import QUICK_ENV_VAR, full_or_quick, quick

ROOT = Path(__file__).resolve().parent.parent


def test_a_full_run_returns_the_full_size_and_prints_nothing(monkeypatch, capsys):
    for value in (None, "0", "false"):
        if value is None:
            monkeypatch.delenv(QUICK_ENV_VAR, raising=False)
        else:
            monkeypatch.setenv(QUICK_ENV_VAR, value)
        assert not quick()
        assert full_or_quick([1, 2, 4, 8], [1, 8], "batch sizes") == [1, 2, 4, 8]
    assert capsys.readouterr().out == ""


def test_a_quick_run_returns_the_quick_size_and_says_the_saved_outputs_ran_the_full_one(monkeypatch, capsys):
    monkeypatch.setenv(QUICK_ENV_VAR, "1")
    assert quick()
    assert full_or_quick(3, 1, "repeats") == 1
    assert (
        capsys.readouterr().out == "quick run (LABKIT_QUICK=1): repeats 1, not 3; the saved outputs ran 3\n"
    )


def test_an_unknown_value_is_refused_with_the_allowed_ones(monkeypatch):
    monkeypatch.setenv(QUICK_ENV_VAR, "fast")
    with pytest.raises(ValueError, match="use 1 .* or 0"):
        quick()


def test_make_test_runs_quick_and_make_notebooks_saves_full_runs():
    makefile = (ROOT / "Makefile").read_text()
    test_recipe = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0]
    notebooks_recipe = makefile.split("\nnotebooks: ", 1)[1].split("\n\n", 1)[0]
    assert f"{QUICK_ENV_VAR}=1" in test_recipe
    assert f"{QUICK_ENV_VAR}=0" in notebooks_recipe


def test_only_cells_whose_outputs_nbval_ignores_shrink_under_a_quick_run():
    """A compared cell must print its saved output in a quick run too, so it may not call full_or_quick."""
    shrinking = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code" and re.search(r"\bfull_or_quick\(", "".join(cell["source"])):
                shrinking.append(path.name)
                assert "nbval-ignore-output" in cell["metadata"].get("tags", []), (
                    f"{path.name} cell {cell.get('id')} calls full_or_quick but nbval compares its output"
                )
    assert shrinking, "no notebook cell uses full_or_quick: the quick run saves nothing"
