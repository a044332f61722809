"""labkit.fast.processes: a measurement in a child process of its own, under one OpenMP wait policy."""

import pytest

from labkit.fast.processes import WAIT_POLICIES, check_policy, current_policy, run_in_child


def test_the_child_runs_under_the_policy_it_was_given_and_its_json_lines_come_back():
    for policy in WAIT_POLICIES:
        rows = run_in_child("labkit.fast.processes", [], policy)
        assert rows == [{"policy": policy, "q4_path": None}]


def test_the_child_gets_the_environment_it_was_given_and_its_policy_wins():
    rows = run_in_child(
        "labkit.fast.processes", [], "PASSIVE", env={"LABKIT_Q4_PATH": "avx2", "OMP_WAIT_POLICY": "ACTIVE"}
    )
    assert rows == [{"policy": "PASSIVE", "q4_path": "avx2"}]
    with pytest.raises(TypeError, match="env must map"):
        run_in_child("labkit.fast.processes", [], "PASSIVE", env={"LABKIT_Q4_PATH": 2})


def test_a_failing_child_raises_with_its_error_output():
    with pytest.raises(RuntimeError, match="No module named"):
        run_in_child("labkit.no_such_module", [], "PASSIVE")


def test_only_openmps_two_policies_are_allowed(monkeypatch):
    with pytest.raises(ValueError, match="PASSIVE, ACTIVE"):
        check_policy("SPIN")
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    assert current_policy() == "PASSIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert current_policy() == "ACTIVE"
