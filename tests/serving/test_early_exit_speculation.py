"""Early-exit self-drafts in the serving engine (labkit.serving.self_draft): the model's own first layers
draft, reading their past from the engine's pool; greedy output is `labkit.generate`'s exactly, sampled
output follows the target's distribution, rejected drafts' blocks come back, and a draft that costs more
than it saves is switched off."""

import pytest
import torch

import labkit
from labkit.decoding.config import DecodingConfig
from labkit.decoding.transforms import apply_transforms
from labkit.serving.engine import Engine
from labkit.serving.speculation import GUESS_EVERY, Speculation
from labkit.speculative.drafters import early_exit_model

from .conftest import run_staggered
from .test_engine_speculation import (
    ARRIVALS,
    ENGINES,
    EOS,
    FALSE_ALARM,
    REQUESTS,
    TINY_ATOL,
    alone,
    assert_all_free,
    assert_named_blocks_are_real,
    chi_square_p_value,
)

EARLY_EXIT = Speculation("early_exit", max_draft=3, exit_layer=1, adaptive=False)  # tiny() has 2 layers


@pytest.mark.parametrize("setting", ["chunked prefill", "small pool, chunked"])
def test_greedy_output_equals_generate_alone(tiny, tokenizer, one_thread, setting):
    engine = Engine(tiny, tokenizer, record_logits=True, speculation=EARLY_EXIT, **ENGINES[setting])
    ids = run_staggered(engine, REQUESTS, ARRIVALS)  # scheduler.check() after every step
    for request_id, (prompt, options) in zip(ids, REQUESTS):
        tokens, logits, _, finish = alone(tiny, tokenizer, prompt, options)
        seq = engine.requests[request_id]
        assert seq.output_ids == tokens and seq.finish_reason == finish, prompt
        assert (torch.stack(seq.logits) - logits).abs().max() < TINY_ATOL  # each drafted position's logits
    metrics = [engine.metrics(i) for i in ids]
    assert sum(m.draft_n_accepted for m in metrics) > 20  # the first layer's drafts were kept ...
    assert sum(m.draft_n - m.draft_n_accepted for m in metrics) > 0  # ... and rejected ones rolled back
    if "small pool" in setting:
        assert engine.scheduler.n_preemptions > 0  # a preempted request drafts again after its recompute
    assert_named_blocks_are_real(engine, ids)
    assert_all_free(engine)


def test_the_draft_reads_the_first_layers_from_the_pool(tiny, tokenizer, one_thread):
    # its drafts are the early-exit model's own greedy tokens on the whole context, recomputed apart
    engine = Engine(tiny, tokenizer, speculation=EARLY_EXIT)
    request_id = engine.add_request("The sea is", max_new_tokens=2)
    engine.step()  # the prompt and its first token: now a decode with its past in the pool
    seq = engine.requests[request_id]
    draft, context = engine.speculator.self_draft.propose(seq, 3), list(seq.token_ids)
    exit_model = early_exit_model(tiny, 1)
    want = labkit.generate_ids(exit_model, tokenizer, context, max_new_tokens=3)
    assert list(draft) == want and engine.speculator.self_draft.seconds_per_token > 0


def test_sampled_tokens_follow_the_target_distribution(tiny, tokenizer, one_thread):
    # As test_engine_speculation's: after a first token 287, the early-exit draft proposes its argmax d at
    # that context; the second token is kept with probability p(d), else resampled from p without d, and
    # must follow p (temperature 0.25, top_k 4).
    prompt = tokenizer("a b c d a b c d").input_ids
    options = {"temperature": 0.25, "top_k": 4, "max_new_tokens": 3}
    speculation = Speculation("early_exit", max_draft=1, exit_layer=1, adaptive=False)
    engine = Engine(tiny, tokenizer, max_num_seqs=64, speculation=speculation)
    ids = [engine.add_request(prompt, seed=seed, **options) for seed in range(1200)]
    engine.run_until_done()
    after_287 = [i for i in ids if engine.requests[i].output_ids[0] == 287]
    assert len(after_287) > 400 and all(engine.metrics(i).draft_n == 1 for i in after_287)
    second = [engine.requests[i].output_ids[1] for i in after_287]
    context = prompt + [287]
    with torch.no_grad():
        logits = tiny(torch.tensor([context]))[0, -1:]  # [1, V]
        draft = int(early_exit_model(tiny, 1)(torch.tensor([context]))[0, -1].argmax())
    transforms = DecodingConfig(**options).transforms(len(prompt), {EOS})
    p = torch.softmax(apply_transforms(logits, torch.tensor([context]), transforms), dim=-1)[0]
    support = p.nonzero().squeeze(-1)  # the top 4
    assert draft in support.tolist() and len(support) == 4  # the draft is one of them: some are kept
    counts = torch.tensor([second.count(token) for token in support.tolist()])
    assert counts.sum() == len(second)  # nothing outside p's support
    assert chi_square_p_value(counts, p[support]) > FALSE_ALARM
    assert sum(engine.metrics(i).draft_n_accepted for i in after_287) == second.count(draft)
    assert_all_free(engine)


def test_a_draft_dearer_than_it_saves_is_switched_off_but_still_scored(tiny, tokenizer, one_thread):
    # a draft priced at 1000 s a token (whatever this machine measures, the moving average stays far above a
    # step): adaptive k stays 0, and the request drafts one unfed token after GUESS_EVERY steps off and
    # after twice as many, scored next step, so its acceptance stays current (tiny()'s first layer guesses
    # its repeated token right)
    engine = Engine(tiny, tokenizer, speculation=Speculation("early_exit", max_draft=3, exit_layer=1))
    engine.speculator.self_draft.seconds_per_token = 1000.0
    prompt, options = "a b c d a b c d", {"max_new_tokens": 2 * GUESS_EVERY + 3}
    request_id = engine.add_request(prompt, **options)
    engine.run_until_done()
    seq = engine.requests[request_id]
    assert seq.output_ids == alone(tiny, tokenizer, prompt, options)[0]
    assert engine.metrics(request_id).draft_n == 0 and seq.drafting.k == 0
    assert seq.drafting.alpha > 0.2  # two guesses scored right: above the prior
    assert engine.speculator.self_draft.seconds_per_token > 100  # two measurements moved it, a little
    assert_all_free(engine)


def test_bad_early_exit_settings_are_refused(tiny, tokenizer, tiny_gemma3, gemma_tokenizer):
    with pytest.raises(ValueError, match="exit_layer must be a whole number of 1 or more"):
        Speculation("early_exit", exit_layer=0)
    with pytest.raises(ValueError, match="exit_layer must be a whole number from 1 to 1"):
        Engine(tiny, tokenizer, speculation=Speculation("early_exit", exit_layer=2))  # all of tiny's layers
    with pytest.raises(ValueError, match="drafts with a Llama's first layers; this engine runs Gemma3"):
        Engine(tiny_gemma3, gemma_tokenizer, speculation=Speculation("early_exit", exit_layer=1))
