"""`python -m labkit.bench`'s command line: it lists every topic and refuses an unknown one. Each topic's
quick run is checked beside that topic's other tests (tests/benchmarks/, and tests/engines/test_real.py
for `engines`), through the `bench_quick_run` fixture of tests/conftest.py."""

import subprocess
import sys

from labkit import bench


def test_bench_lists_every_topic_in_order():
    listed = subprocess.run(
        [sys.executable, "-m", "labkit.bench", "--list"], capture_output=True, text=True, check=True
    ).stdout
    listed_topics = [line.split()[0] for line in listed.splitlines()]
    assert listed_topics == list(bench.TOPICS)  # every topic in order, each with its module's docstring line
    assert all(len(line.split()) > 1 for line in listed.splitlines())


def test_bench_rejects_an_unknown_topic():
    run = subprocess.run([sys.executable, "-m", "labkit.bench", "nope"], capture_output=True, text=True)
    assert run.returncode == 2 and "unknown topic 'nope'; choose one of: decode" in run.stderr
