"""Helpers shared by the engine tests (fixtures live in tests/conftest.py)."""

import pytest
import torch

import labkit
from labkit.core.gemma3 import Gemma3, Gemma3Config

# Batched vs alone, the same float32 arithmetic in other shapes (rows padded to the longest, keys
# padded and masked, a shared prefix computed in another row), so matmuls may sum in another order.
# Measured on a 2-core CPU: max |batched - alone| = 6.0e-05 over every logit of every step of SmolLM2
# (logits reach ~30), 4.6e-05 of Gemma-3-270M. The bound leaves ~16x headroom for other CPUs' kernels
# and still catches a real mistake (a wrong position or another row's keys move logits by 0.1-10).
LOGITS_ATOL = 1e-3
# A greedy token can only flip where the top two logits are closer than the error: tokens are compared
# only up to the first step whose single-sequence top-2 margin is below 10x the bound (a near-tie),
# and that step's logits still are (they depend only on the agreeing prefix).
NEAR_TIE = 10 * LOGITS_ATOL


def run_staggered(engine, requests, arrivals):
    """Add requests[i] = (prompt, options) once the engine has run arrivals[i] steps; step, checking the
    scheduler's invariants after each step, until all are done. Returns the request ids in order.

        >>> ids = run_staggered(engine, [("Hi", {"max_new_tokens": 4}), ("Yo", {})], [0, 2])
    """
    ids, step = [], 0
    while len(ids) < len(requests) or engine.has_unfinished():
        while len(ids) < len(requests) and arrivals[len(ids)] <= step:
            prompt, options = requests[len(ids)]
            ids.append(engine.add_request(prompt, **options))
        engine.step()
        engine.scheduler.check()
        step += 1
    return ids


def alone(model, tokenizer, prompt_ids, max_new_tokens):
    """(tokens, logits [n, V], top-2 margins [n]) of greedy `labkit.generate` on the prompt alone."""
    steps = list(
        labkit.generate(model, tokenizer, prompt_ids, max_new_tokens=max_new_tokens, return_logits=True)
    )
    logits = torch.stack([s.logits for s in steps])
    top2 = logits.topk(2, dim=-1).values
    return [s.token_id for s in steps], logits, top2[:, 0] - top2[:, 1]


def compare(engine, request_id, model, tokenizer, prompt_ids, max_new_tokens) -> tuple[int, int, float]:
    """Assert batched == alone up to the first near-tie; (tokens compared, tokens alone, max logit difference)."""
    tokens, logits, margins = alone(model, tokenizer, prompt_ids, max_new_tokens)
    seq = engine.requests[request_id]
    ties = (margins <= NEAR_TIE).nonzero()
    trusted = int(ties[0]) if len(ties) else len(tokens)  # steps before the first near-tie
    assert seq.output_ids[:trusted] == tokens[:trusted]
    checked = min(trusted + 1, len(tokens), len(seq.output_ids))  # a near-tie step's logits still agree
    difference = float((torch.stack(seq.logits[:checked]) - logits[:checked]).abs().max())
    assert difference < LOGITS_ATOL
    if trusted == len(tokens):
        assert len(seq.output_ids) == len(tokens) and seq.finish_reason in ("eos", "length")
    return trusted, len(tokens), difference


@pytest.fixture(scope="module")
def tiny_gemma3():
    """labkit's Gemma3 of `Gemma3Config.tiny()` (window 4), random weights (seed 0)."""
    torch.manual_seed(0)
    return Gemma3(Gemma3Config.tiny()).eval()


@pytest.fixture(scope="module")
def gemma_tokenizer():
    return labkit.load_tokenizer("gemma3-270m")
