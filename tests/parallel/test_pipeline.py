"""Pipeline parallelism over real processes (labkit.parallel.pipeline): two stages of SmolLM2's layers give
one process's logits, whatever the micro-batches, and the bubble formula is the textbook one."""

import pytest
import torch

from labkit.core.llama import Llama, LlamaConfig
from labkit.models.loading import load_model
from labkit.parallel.pipeline import bubble_fraction, pp_forward, stage_layers
from labkit.parallel.ranks import run_ranks

MODEL = "smollm2-135m"


def test_the_bubble_is_s_minus_one_over_m_plus_s_minus_one():
    assert [round(bubble_fraction(2, m), 3) for m in (1, 2, 4, 8)] == [0.5, 0.333, 0.2, 0.111]
    assert bubble_fraction(1, 3) == 0.0
    with pytest.raises(ValueError, match="micro_batches"):
        bubble_fraction(2, 0)


def test_stages_are_consecutive_and_weigh_the_head_on_the_last():
    model = Llama(LlamaConfig(n_layers=30)).eval()  # SmolLM2's shapes, random weights
    assert stage_layers(model, 2) == [range(0, 19), range(19, 30)]
    assert stage_layers(model, 1) == [range(0, 30)]
    four = stage_layers(model, 4)
    assert (
        four[0].start == 0 and four[-1].stop == 30 and all(a.stop == b.start for a, b in zip(four, four[1:]))
    )
    with pytest.raises(ValueError, match="world"):
        stage_layers(Llama(LlamaConfig.tiny()), 3)  # 2 layers cannot make 3 stages


@pytest.mark.slow
def test_two_stages_give_one_processs_logits_at_any_micro_batch_count():
    ids = torch.randint(1, 49152, (4, 12), generator=torch.Generator().manual_seed(0))
    model, _ = load_model(MODEL, impl="labkit")
    with torch.no_grad():
        one = model(ids)  # the whole model's own forward pass, in this process
    for micro_batches in (1, 4):
        first, last = run_ranks(pp_forward, 2, MODEL, ids, micro_batches)
        assert first["logits"] is None and 0 <= first["bubble"] < 1
        assert last["logits"].shape == one.shape == (4, 12, 49152)
        assert (last["logits"] - one).abs().max() < 1e-3  # float32 rounding: narrower matmuls
