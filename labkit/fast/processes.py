"""Peers at their best: a measurement in a child process of its own, under one OpenMP wait policy.

Some settings belong to a process, not to a model: OpenMP reads OMP_WAIT_POLICY once, when its
threads start, and a runtime's spinning threads take cores from anything else in the process. So an
engine is timed the way llama-bench times it: each candidate setting in a fresh process, the winner
reported with its settings. A spinning (ACTIVE) waiter answers the next op at once and is fastest on an
idle machine; it burns its core while it waits, which is ruinous when another process needs that core
(notebook 12 measures both). The course's notebooks keep PASSIVE, since they share the machine.

    >>> rows = run_in_child("labkit.benchmarks.fast_child", ["llama_cpp", "--tokens", "32"], "ACTIVE")
    >>> rows[0]["tokens_per_second"]
    104.2
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

WAIT_POLICIES = ("PASSIVE", "ACTIVE")  # OpenMP's two: sleep when idle, or spin


def check_policy(policy: str) -> str:
    """The policy, or a ValueError naming the allowed ones."""
    if policy not in WAIT_POLICIES:
        raise ValueError(f"Unknown OpenMP wait policy {policy!r}; choose one of: {', '.join(WAIT_POLICIES)}.")
    return policy


def current_policy() -> str:
    """This process's OMP_WAIT_POLICY (upper case; 'ACTIVE' when unset, as OpenMP runtimes mostly spin a while)."""
    return os.environ.get("OMP_WAIT_POLICY", "ACTIVE").upper()


def run_in_child(
    module: str, args: Sequence[str], policy: str, timeout: float = 1800, env: Mapping[str, str] | None = None
) -> list[dict]:
    """Run `python -m module *args` with OMP_WAIT_POLICY=policy (and `env` added to this process's
    environment); the JSON objects it printed, one per line.

    A child that fails raises a RuntimeError with the end of its error output.
    """
    if env is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in dict(env).items()):
        raise TypeError("env must map environment variable names (str) to values (str).")
    env = {**os.environ, **(env or {}), "OMP_WAIT_POLICY": check_policy(policy)}
    done = subprocess.run(
        [sys.executable, "-m", module, *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"`python -m {module} {' '.join(args)}` under OMP_WAIT_POLICY={policy} failed "
            f"(exit {done.returncode}):\n{done.stderr[-3000:]}"
        )
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


# the smallest child: says its policy and the SIMD path it was asked for (tests/fast)
if __name__ == "__main__":
    print(json.dumps({"policy": current_policy(), "q4_path": os.environ.get("LABKIT_Q4_PATH")}))
