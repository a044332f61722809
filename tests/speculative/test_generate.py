"""Speculative decoding is exact: greedy output equals the target's greedy output, sampled output has the
target's distribution (chi-square tests with a stated false-alarm rate), and bad input fails early."""

import copy
import dataclasses

import pytest
import torch

import labkit
from labkit.decoding.config import DecodingConfig
from labkit.decoding.transforms import apply_transforms
from labkit.speculative import rule
from labkit.speculative.drafters import ModelDrafter, PromptLookupDrafter, early_exit_drafter
from labkit.speculative.generate import speculative_generate
from labkit.speculative.rule import (
    accept_or_resample,
    expected_tokens_per_step,
    residual_distribution,
    verify,
)

FALSE_ALARM = 1e-3  # each chi-square test wrongly fails a correct implementation 0.1% of the time
PROMPT = [1, 504, 3575, 282, 4649, 314, 504, 3575]  # repeats "504 3575", so prompt lookup has matches


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """P(X >= observed statistic) for X ~ chi-square with (cells - 1) degrees of freedom.

    The chi-square tail is the regularized upper incomplete gamma function: Q(df/2, x/2).
    Cells expected to hold fewer than 5 draws are pooled into one, as the approximation requires.
    """
    expected = probs.double() * counts.sum()
    small = expected < 5
    counts, expected = counts.double(), expected
    if small.any():
        counts = torch.cat([counts[~small], counts[small].sum()[None]])
        expected = torch.cat([expected[~small], expected[small].sum()[None]])
    statistic = ((counts - expected) ** 2 / expected.clamp(min=1e-12)).sum()
    df = len(counts) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), statistic / 2))


def test_chi_square_tail_matches_known_critical_values():
    # Tables: chi-square with 7 degrees of freedom exceeds 24.32 with probability 0.001, 14.07 with 0.05.
    for critical, tail in [(24.322, 0.001), (14.067, 0.05)]:
        assert (
            abs(
                float(
                    torch.special.gammaincc(
                        torch.tensor(3.5, dtype=torch.float64),
                        torch.tensor(critical / 2, dtype=torch.float64),
                    )
                )
                - tail
            )
            < 1e-4
        )


P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
Q = torch.tensor([0.05, 0.10, 0.15, 0.20, 0.25, 0.25])


def _one_step_samples(p, q, draws=20000, seed=0, fixed_draft=None):
    generator = torch.Generator().manual_seed(seed)
    p_rows, q_rows = p.expand(draws, -1), q.expand(draws, -1)
    if fixed_draft is None:
        drafts = torch.multinomial(q_rows, 1, replacement=True, generator=generator).squeeze(-1)
    else:  # a deterministic drafter: always the same token, q one-hot
        drafts = torch.full((draws,), fixed_draft)
        q_rows = torch.nn.functional.one_hot(drafts, len(p)).float()
    accepted, tokens = accept_or_resample(p_rows, q_rows, drafts, generator)
    return accepted, torch.bincount(tokens, minlength=len(p))


def test_residual_is_normalized_positive_part_of_p_minus_q():
    expected = (P - Q).clamp(min=0) / (P - Q).clamp(min=0).sum()
    assert torch.allclose(residual_distribution(P[None], Q[None])[0], expected)
    # identical distributions: nothing is ever rejected; the residual falls back to p (no NaN)
    assert torch.allclose(residual_distribution(P[None], P[None])[0], P)


def test_one_step_output_is_distributed_as_p():
    accepted, counts = _one_step_samples(P, Q)
    assert chi_square_p_value(counts, P) > FALSE_ALARM
    # and a draft is kept with probability sum_x min(p, q) = 1 - TV(p, q) (Leviathan et al. 2023, Thm 3.5)
    assert abs(accepted.float().mean().item() - torch.minimum(P, Q).sum().item()) < 0.015


def test_one_step_with_a_deterministic_draft_is_distributed_as_p():
    accepted, counts = _one_step_samples(P, Q, fixed_draft=3)
    assert chi_square_p_value(counts, P) > FALSE_ALARM
    assert abs(accepted.float().mean().item() - P[3].item()) < 0.015  # kept with probability p(x)


@pytest.mark.parametrize("wrong_residual", [lambda p, q: p, lambda p, q: q], ids=["from p", "from q"])
def test_the_same_test_catches_a_wrong_residual(monkeypatch, wrong_residual):
    monkeypatch.setattr(rule, "residual_distribution", wrong_residual)
    _, counts = _one_step_samples(P, Q)
    assert chi_square_p_value(counts, P) < FALSE_ALARM


def test_rule_frequencies_runs_the_same_rule_on_drafts_from_q():
    kept, frequencies = rule.rule_frequencies(P, Q, 20000, torch.Generator().manual_seed(0))
    accepted, counts = _one_step_samples(P, Q)  # the same draws, the same generator stream
    assert kept == accepted.float().mean().item() and torch.equal(frequencies, counts.float() / 20000)
    with pytest.raises(ValueError, match="draws"):
        rule.rule_frequencies(P, Q, 0, torch.Generator())


def test_verify_greedy_and_bonus():
    logits = torch.log(torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.2, 0.6]]) + 1e-9)
    assert rule.verify_greedy(logits, [1, 0]) == (2, 2)  # both kept, bonus = argmax of the last row
    assert rule.verify_greedy(logits, [1, 2]) == (1, 0)  # second rejected, replaced by the argmax
    probs = torch.softmax(logits, dim=-1)
    one_hot_p = torch.nn.functional.one_hot(logits.argmax(-1), 3).float()
    # the general rule agrees
    assert verify(one_hot_p, [1, 2], None, torch.Generator().manual_seed(0)) == (1, 0)
    assert verify(probs, [], None, torch.Generator().manual_seed(0))[0] == 0


def test_expected_tokens_per_step():
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert abs(expected_tokens_per_step(0.5, 2) - 1.75) < 1e-12  # 1 + 0.5 + 0.25


def _tiny_drafters(target):
    return {
        "prompt lookup": PromptLookupDrafter(max_ngram_size=2),
        "early exit 1 of 2": early_exit_drafter(target, 1),
        "other tiny model": ModelDrafter(labkit.tiny_model("labkit", seed=1)),
        "transformers twin (recompute)": ModelDrafter(labkit.tiny_model("transformers", seed=0)),
    }


@pytest.mark.parametrize(
    "name", ["prompt lookup", "early exit 1 of 2", "other tiny model", "transformers twin (recompute)"]
)
@pytest.mark.parametrize("gamma", [1, 3])
def test_greedy_is_token_identical_to_plain_greedy_on_tiny(tokenizer, name, gamma):
    target = labkit.tiny_model("labkit")
    expected = labkit.generate_ids(target, tokenizer, PROMPT, max_new_tokens=24)
    result = speculative_generate(
        target, tokenizer, PROMPT, drafter=_tiny_drafters(target)[name], gamma=gamma, max_new_tokens=24
    )
    assert result.token_ids == expected
    stats = result.stats
    assert stats.new_tokens == len(expected) == sum(s.accepted + 1 for s in stats.steps)
    assert stats.target_calls == len(stats.steps) and stats.proposed == sum(
        len(s.proposed) for s in stats.steps
    )
    assert 0 <= stats.acceptance_rate <= 1 and stats.tokens_per_call >= 1
    # alpha counts the verified drafts: all accepted ones and the first rejected one of each round
    assert stats.accepted + stats.rejected == sum(min(len(s.proposed), s.accepted + 1) for s in stats.steps)


def test_transformers_target_uses_the_recompute_path(tokenizer):
    target = labkit.tiny_model("transformers")
    expected = labkit.generate_ids(target, tokenizer, PROMPT, max_new_tokens=12)
    result = speculative_generate(
        target, tokenizer, PROMPT, drafter=early_exit_drafter(target, 1), gamma=3, max_new_tokens=12
    )
    assert result.token_ids == expected


def test_twin_drafter_is_always_accepted(tokenizer):
    target = labkit.tiny_model("labkit")
    result = speculative_generate(
        target,
        tokenizer,
        PROMPT,
        drafter=ModelDrafter(labkit.tiny_model("labkit")),
        gamma=4,
        max_new_tokens=21,
    )
    assert result.stats.acceptance_rate == 1.0 and result.stats.target_calls == 5  # 4 x (4 + bonus) + 1


def test_sampled_two_token_continuations_have_the_target_distribution(tokenizer):
    """End to end on the tiny model, softened to 5 candidates per step (temperature 0.2, top-k 5)."""
    target = labkit.tiny_model("labkit")
    options = {"temperature": 0.2, "top_k": 5}
    transforms = DecodingConfig(**options).transforms(len(PROMPT))

    def probs(ids):
        ids = torch.tensor([ids])
        with torch.no_grad():
            return torch.softmax(apply_transforms(target(ids)[:, -1], ids, transforms), dim=-1)[0]

    first = probs(PROMPT)
    firsts = first.nonzero().flatten().tolist()
    pairs = {(a, b): first[a] * pb for a in firsts for b, pb in enumerate(probs(PROMPT + [a])) if pb > 0}
    index = {pair: i for i, pair in enumerate(pairs)}
    drafter = early_exit_drafter(target, 1)  # overlaps the target's distribution only partly
    generator = torch.Generator().manual_seed(0)
    counts = torch.zeros(len(pairs))
    for _ in range(1200):
        ids = speculative_generate(
            target,
            tokenizer,
            PROMPT,
            drafter=drafter,
            gamma=2,
            max_new_tokens=2,
            generator=generator,
            **options,
        ).token_ids
        counts[index[tuple(ids)]] += 1
    assert chi_square_p_value(counts, torch.stack(list(pairs.values()))) > FALSE_ALARM


def test_kv_cache_crop_rolls_back():
    model = labkit.tiny_model("labkit")
    ids = torch.tensor([PROMPT])
    cache = model.new_cache(1, 16)
    with torch.no_grad():
        model(ids, cache)
        cache.crop(5)
        resumed = model(ids[:, 5:6], cache)[0, -1]
        fresh = model(ids[:, :6])[0, -1]
    assert cache.length == 6 and torch.allclose(resumed, fresh, atol=1e-5)
    for bad in (-1, 7, 2.0):
        with pytest.raises(ValueError, match="length"):
            cache.crop(bad)


def test_bad_arguments_fail_before_generating(tokenizer):
    target = labkit.tiny_model("labkit")
    for gamma in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match="gamma"):
            speculative_generate(target, tokenizer, PROMPT, drafter=PromptLookupDrafter(), gamma=gamma)
    with pytest.raises(TypeError, match="drafter"):
        speculative_generate(target, tokenizer, PROMPT, drafter="prompt lookup")
    with pytest.raises(TypeError, match="target"):
        speculative_generate("SmolLM2", tokenizer, PROMPT, drafter=PromptLookupDrafter())
    with pytest.raises(ValueError, match="max_new_tokens"):
        speculative_generate(target, tokenizer, PROMPT, drafter=PromptLookupDrafter(), max_new_tokens=-1)
    with pytest.raises(ValueError, match="temperature"):
        speculative_generate(target, tokenizer, PROMPT, drafter=PromptLookupDrafter(), temperature=-1)
    with pytest.raises(ValueError, match="not both"):
        speculative_generate(
            target, tokenizer, PROMPT, DecodingConfig(), drafter=PromptLookupDrafter(), seed=1
        )
    # an option it does not know is listed with the known ones
    with pytest.raises(TypeError, match="num_beams"):
        speculative_generate(target, tokenizer, PROMPT, drafter=PromptLookupDrafter(), beams=2)


def test_mismatched_drafts_are_refused_with_the_fix(tokenizer):
    target = labkit.tiny_model("labkit")
    small_vocab = labkit.Llama(dataclasses.replace(labkit.LlamaConfig.tiny(), vocab_size=1000))
    with pytest.raises(ValueError, match="vocabulary"):
        speculative_generate(target, tokenizer, PROMPT, drafter=ModelDrafter(small_vocab))
    other_tokenizer = copy.deepcopy(tokenizer)
    other_tokenizer.add_tokens(["<an extra token>"])
    with pytest.raises(ValueError, match="tokenizer"):
        speculative_generate(
            target, tokenizer, PROMPT, drafter=ModelDrafter(labkit.tiny_model("labkit"), other_tokenizer)
        )
    with pytest.raises(ValueError, match=r"to\(torch.float32\)"):
        speculative_generate(
            target, tokenizer, PROMPT, drafter=ModelDrafter(labkit.tiny_model("labkit").to(torch.bfloat16))
        )
    with pytest.raises(ValueError, match="Move the draft"):
        speculative_generate(
            target, tokenizer, PROMPT, drafter=ModelDrafter(labkit.tiny_model("labkit").to("meta"))
        )


# --- the real model ---------------------------------------------------------------------------------

EXTRACTIVE = (
    "Copy this sentence exactly: The committee approved the new library budget on Tuesday, and the "
    "construction of the reading room will begin in early spring."
)


@pytest.mark.slow
def test_greedy_is_token_identical_on_smollm2_for_every_drafter(smollm2, smollm2_labkit, tokenizer):
    prompt = labkit.chat_prompt(tokenizer, EXTRACTIVE)
    expected = labkit.generate_ids(smollm2_labkit, tokenizer, prompt, max_new_tokens=32)
    drafters = [
        PromptLookupDrafter(),
        early_exit_drafter(smollm2_labkit, 8),
        ModelDrafter(labkit.tiny_model("labkit"), tokenizer),
    ]
    for drafter in drafters:
        result = speculative_generate(
            smollm2_labkit, tokenizer, prompt, drafter=drafter, gamma=4, max_new_tokens=32
        )
        assert result.token_ids == expected, drafter
    # copying: prompt lookup guesses well
    assert (
        speculative_generate(
            smollm2_labkit, tokenizer, prompt, drafter=drafters[0], max_new_tokens=32
        ).stats.acceptance_rate
        > 0.5
    )


@pytest.mark.slow
def test_greedy_matches_transformers_assisted_generation(smollm2, smollm2_labkit, tokenizer):
    hf_model = smollm2[0]
    prompt = labkit.chat_prompt(tokenizer, EXTRACTIVE)
    input_ids = torch.tensor([prompt])
    common = {"attention_mask": torch.ones_like(input_ids), "max_new_tokens": 24, "do_sample": False}
    with torch.no_grad():
        lookup = hf_model.generate(input_ids, prompt_lookup_num_tokens=4, **common)[0, len(prompt) :].tolist()
        assisted = hf_model.generate(input_ids, assistant_model=labkit.tiny_model("transformers"), **common)[
            0, len(prompt) :
        ].tolist()
    ours_lookup = speculative_generate(
        smollm2_labkit, tokenizer, prompt, drafter=PromptLookupDrafter(2), gamma=4, max_new_tokens=24
    ).token_ids
    tiny_drafter = ModelDrafter(labkit.tiny_model("labkit"))
    ours_assisted = speculative_generate(
        smollm2_labkit, tokenizer, prompt, drafter=tiny_drafter, gamma=4, max_new_tokens=24
    ).token_ids
    assert ours_lookup == lookup and ours_assisted == assisted


def test_exercise_checkers_accept_right_answers_and_hint_at_wrong_ones(capsys):
    from labkit.checks.speculative import check_expected_tokens, check_prompt_lookup, check_residual

    assert not check_expected_tokens(None) and "Not attempted" in capsys.readouterr().out
    assert check_expected_tokens(lambda alpha, gamma: sum(alpha**i for i in range(gamma + 1)))
    assert not check_expected_tokens(lambda alpha, gamma: alpha * gamma + 1)
    assert "first rejection" in capsys.readouterr().out
    assert check_residual(lambda p, q: (p - q).clamp(min=0) / (p - q).clamp(min=0).sum())
    assert not check_residual(lambda p, q: (p - q).clamp(min=0)) and "divide" in capsys.readouterr().out
    assert not check_residual(lambda p, q: 1 / 0) and "ZeroDivisionError" in capsys.readouterr().out
    assert not check_prompt_lookup(lambda ids, gamma: PromptLookupDrafter(3).propose(ids, gamma)[0])
    assert "calling labkit's version does not count" in capsys.readouterr().out
    assert not check_prompt_lookup(lambda ids, gamma: ids[-gamma:])


def test_adaptive_draft_length_keeps_the_output_and_shrinks_after_misses(tokenizer):
    target = labkit.tiny_model("labkit")
    expected = labkit.generate_ids(target, tokenizer, PROMPT, max_new_tokens=20)
    drafter = early_exit_drafter(target, 1)
    result = speculative_generate(
        target, tokenizer, PROMPT, drafter=drafter, gamma=6, max_new_tokens=20, adaptive=True
    )
    fixed = speculative_generate(target, tokenizer, PROMPT, drafter=drafter, gamma=6, max_new_tokens=20)
    assert result.token_ids == fixed.token_ids == expected
    length, produced = 6, 0  # transformers' heuristic schedule: +2 after a full acceptance, -1 after a miss
    for step in result.stats.steps:
        assert len(step.proposed) == min(length, 20 - produced - 1)
        if step.proposed:
            length = min(6, length + 2) if step.bonus else max(1, length - 1)
        produced += step.accepted + 1
    assert any(not s.bonus for s in result.stats.steps) and any(s.bonus for s in result.stats.steps)
