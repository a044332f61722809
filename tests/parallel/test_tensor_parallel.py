"""Tensor parallelism over real processes (labkit.parallel): SmolLM2 split across 2 gloo ranks gives one
process's logits within float32 rounding and the same greedy text; the launcher reports a failing rank and
leaves no process behind."""

import multiprocessing as mp

import pytest
import torch

from labkit.core.llama import Llama, LlamaConfig
from labkit.parallel.ranks import run_ranks
from labkit.parallel.tensor_parallel import even_split, shard_llama
from labkit.parallel.tensor_run import tp_session

MODEL = "smollm2-135m"
# Measured largest |difference| of the split's logits from one process's, SmolLM2, 2 ranks, these ids: 5.2e-5
# (logits up to 30.9): the row-parallel sums are added in another order. A wrong slice (a head's rows off by one head, a
# missing all-reduce) moves them by 1 or more.
TOLERANCE = 1e-3


def test_even_split_gives_the_first_ranks_the_extra_item():
    assert even_split(3, 2) == [range(0, 2), range(2, 3)]
    assert even_split(1536, 2) == [range(0, 768), range(768, 1536)]
    assert even_split(5, 5) == [range(i, i + 1) for i in range(5)]
    with pytest.raises(ValueError, match="cannot be split over 4 ranks"):
        even_split(3, 4)


def test_a_shard_is_a_llama_of_its_share_of_heads_and_columns():
    model = Llama(LlamaConfig.tiny()).eval()  # 4 query heads on 2 KV heads, MLP 128
    shards = [shard_llama(model, rank, 2) for rank in range(2)]
    assert [(s.config.n_heads, s.config.n_kv_heads, s.config.intermediate_size) for s in shards] == [
        (2, 1, 64)
    ] * 2
    first = shards[0].layers[0]
    assert torch.equal(first.self_attn.k_proj.weight, model.layers[0].self_attn.k_proj.weight[:16])
    assert torch.equal(shards[1].layers[0].mlp.down_proj.weight, model.layers[0].mlp.down_proj.weight[:, 64:])
    assert shards[1].lm_head.weight.shape == (LlamaConfig.tiny().vocab_size // 2, 64)
    with pytest.raises(ValueError, match="rank"):
        shard_llama(model, 2, 2)


@pytest.mark.slow
def test_two_ranks_give_one_processs_logits_and_greedy_text_and_count_their_collectives():
    ids = torch.tensor([[1, 504, 3458, 282, 260, 1789, 30, 378]])
    prompt, context = "The three primary colours are", 32
    one = run_ranks(tp_session, 1, MODEL, ids, prompt, 16, context, threads=2)[0]
    first, second = run_ranks(tp_session, 2, MODEL, ids, prompt, 16, context)
    assert second["logits"] is None and second["text"] is None  # rank 0's alone travel back
    assert first["logits"].shape == one["logits"].shape == (1, 8, 49152)
    assert (first["logits"] - one["logits"]).abs().max() < TOLERANCE
    assert one["logits"].abs().max() > 5  # real logits, not zeros on both sides
    assert first["text"] == one["text"] and len(one["text"]) > 20
    assert one["costs"]["calls"] == 0 and one["link"] == {}  # the whole model talks to no one
    layers = 30  # two all-reduces a layer, one all-gather of the head's logits
    assert first["costs"]["calls"] == second["costs"]["calls"] == 2 * layers + 1
    assert 0 < first["costs"]["collective_seconds"] < first["costs"]["seconds"]
    assert sorted(first["link"]) == [576, 49152] and min(first["link"].values()) > 0


def fail_on_rank_one(rank, world):
    if rank == 1:
        raise ValueError("rank one refuses")
    torch.distributed.barrier()  # rank 0 waits for a rank that never comes: run_ranks must end it
    return rank


@pytest.mark.slow
def test_a_failing_rank_ends_the_run_with_its_traceback_and_no_process_left():
    with pytest.raises(RuntimeError, match="(?s)rank 1 of 2 failed.*rank one refuses"):
        run_ranks(fail_on_rank_one, 2, timeout=240)  # a backstop: a busy box starts processes slowly
    assert mp.active_children() == []


def test_bad_launches_are_refused_before_any_process_starts():
    def local(rank, world):
        return rank

    with pytest.raises(TypeError, match="top level"):
        run_ranks(local, 2)
    with pytest.raises(ValueError, match="world"):
        run_ranks(tp_session, 0)
    with pytest.raises(ValueError, match="threads"):
        run_ranks(tp_session, 1, threads=0)
