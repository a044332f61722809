"""labkit.serving.http.openmp_team: the model is built on a short-lived thread with the process's torch
threads, its result or its error handed back; the engine thread steps with the count it is given."""

import threading

import pytest
import torch

from labkit.serving.http.openmp_team import built_on_a_thread


def test_build_runs_on_another_thread_with_the_given_torch_threads_and_returns_its_result():
    seen = {}

    def build():
        seen["thread"], seen["threads"] = threading.current_thread(), torch.get_num_threads()
        return "engine"

    assert built_on_a_thread(build, threads=1) == "engine"
    assert seen["thread"] is not threading.current_thread() and seen["threads"] == 1


def test_an_error_in_build_reaches_the_caller_and_a_bad_count_is_refused():
    def build():
        raise ValueError("max_num_seqs must be at least 1")

    with pytest.raises(ValueError, match="max_num_seqs must be at least 1"):
        built_on_a_thread(build, threads=1)
    with pytest.raises(ValueError, match="threads"):
        built_on_a_thread(lambda: None, threads=0)
