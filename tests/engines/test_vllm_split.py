"""vLLM's own tensor parallelism (notebook 16): Gemma-3-270M split over 2 ranks of one core gives
transformers' greedy tokens, and a stopped split leaves no process, port, rendezvous file or shared memory.

vLLM's CPU all-reduce runs through shared-memory segments (/dev/shm/vllm_dist_<id>-tp:...-cpushm_<rank>,
4 MB each) that vLLM does not unlink when it stops; labkit's start_vllm_server gives the server a temporary
folder of its own and removes both once it has stopped. Its ranks' message queues are Python shared memory
(psm_<id>, 24-240 MB each), which a rank killed at stop can leave behind: the launcher removes every /dev/shm
file the server's processes had mapped (sweep_shared_memory). Skipped without vLLM (`make engines`); CI fails.
"""

from __future__ import annotations

from pathlib import Path

import openai
import psutil
import pytest
import torch

from labkit.engines import start_vllm_server
from labkit.engines.vllm import remove_rendezvous
from labkit.launcher import shared_memory_of

from .test_real import assert_fully_stopped, margin, need_vllm, server_tree

PROMPT = "def fibonacci(n):"  # its 8 greedy margins are 0.22 or more (checked below: no near-tie)
SHARED_MEMORY = Path("/dev/shm")

pytestmark = pytest.mark.slow


def vllm_segments() -> set[str]:
    return {path.name for path in SHARED_MEMORY.glob("vllm_dist_*")}


def test_two_ranks_answer_as_transformers_and_leave_nothing_behind(gemma3):
    need_vllm()
    model, tokenizer = gemma3
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=8, do_sample=False, output_scores=True,
                             return_dict_in_generate=True, top_p=None, top_k=None)  # fmt: skip
    expected = tokenizer.decode(out.sequences[0, ids.shape[1] :])
    assert min(margin(scores[0]) for scores in out.scores) > 0.1, "the reference must have no near-tie"
    before = vllm_segments()
    server = start_vllm_server("gemma3-270m", tensor_parallel_size=2)
    processes = server_tree(server)
    try:
        temp = Path(psutil.Process(server.process.pid).environ()["TMPDIR"])
        assert vllm_segments() - before, "two ranks all-reduce through shared memory"
        mapped = shared_memory_of(server.group)
        assert any(path.name.startswith("psm_") for path in mapped), "its message queues: Python segments"
        reply = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0).completions.create(
            model="gemma3-270m", prompt=PROMPT, max_tokens=8, temperature=0
        )
    finally:
        server.stop()
    assert reply.choices[0].text == expected
    assert_fully_stopped(server, processes)
    assert vllm_segments() <= before and not temp.exists()
    assert not [path for path in mapped if path.exists()]


def test_removing_a_rendezvous_deletes_only_its_own_segments(tmp_path):
    temp, shared = tmp_path / "vllm-temp", tmp_path / "shm"
    temp.mkdir()
    shared.mkdir()
    (temp / "vllm_dist_ab12").write_text("store")
    for name in (
        "vllm_dist_ab12-tp:0-[0-1]-cpushm_0",
        "vllm_dist_ab12-tp:0-[0-1]-cpushm_1",
        "vllm_dist_cd34-x",
    ):
        (shared / name).write_bytes(b"\0")
    remove_rendezvous(temp, shared)
    assert not temp.exists()
    assert [path.name for path in shared.iterdir()] == ["vllm_dist_cd34-x"]  # another server's: kept
