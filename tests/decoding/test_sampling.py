"""Every logits transform against the transformers processor of the same name, plus invariants.

Parity is exact (torch.equal on the returned logits, -inf included) on random logits, logits with
ties and -inf entries, real SmolLM2 logits, and extreme parameter values.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.generation import logits_process as hf

from labkit.decoding import sampling

V = 64


def random_logits(seed=0, batch=3, vocab=V):
    return torch.randn(batch, vocab, generator=torch.Generator().manual_seed(seed)) * 3


def tied_logits():
    """Rows with many exact ties and some tokens already at -inf."""
    logits = torch.tensor(
        [
            [2.0, 2.0, 2.0, 1.0, 1.0, 0.0, 0.0, 0.0] * 8,
            [5.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0] * 8,
            [0.0] * V,
        ]
    )
    logits[0, 40:] = float("-inf")
    logits[1, ::3] = float("-inf")
    return logits


@pytest.fixture(scope="module")
def real_logits(smollm2):
    """SmolLM2's next-token logits for two prompts, [2, 49152]."""
    model, tokenizer = smollm2
    rows = []
    for prompt in ["The capital of France is", "Once upon a time, in a small village,"]:
        with torch.no_grad():
            rows.append(model(torch.tensor([tokenizer(prompt)["input_ids"]])).logits[0, -1])
    return torch.stack(rows).float()


def logit_sets():
    return [random_logits(0), random_logits(1, batch=1), tied_logits(), random_logits(2) * 40]


# (labkit transform, transformers processor) pairs, for each parameter value worth trying.
TRUNCATIONS = [
    *[(lambda x, k=k: sampling.top_k_filter(x, k), hf.TopKLogitsWarper(k)) for k in (1, 2, 5, 50, V, 10 * V)],
    *[
        (lambda x, p=p: sampling.top_p_filter(x, p), hf.TopPLogitsWarper(p))
        for p in (1e-9, 0.1, 0.5, 0.9, 0.999, 1.0)
    ],
    *[(lambda x, p=p: sampling.min_p_filter(x, p), hf.MinPLogitsWarper(p)) for p in (0.0, 0.05, 0.5, 1.0)],
    *[
        (lambda x, m=m: sampling.typical_filter(x, m), hf.TypicalLogitsWarper(m))
        for m in (1e-6, 0.2, 0.9, 0.999)
    ],
    *[
        (lambda x, e=e: sampling.epsilon_filter(x, e), hf.EpsilonLogitsWarper(e))
        for e in (1e-6, 3e-4, 0.05, 0.9)
    ],
    *[(lambda x, e=e: sampling.eta_filter(x, e), hf.EtaLogitsWarper(e)) for e in (1e-6, 3e-4, 0.05, 0.9)],
    *[
        (lambda x, t=t: sampling.apply_temperature(x, t), hf.TemperatureLogitsWarper(t))
        for t in (1e-4, 0.7, 1.0, 50.0)
    ],
    *[
        (
            lambda x, k=k: sampling.top_k_filter(x, 3, min_tokens_to_keep=k),
            hf.TopKLogitsWarper(3, min_tokens_to_keep=k),
        )
        for k in (1, 7)
    ],
    *[
        (
            lambda x, k=k: sampling.top_p_filter(x, 0.3, min_tokens_to_keep=k),
            hf.TopPLogitsWarper(0.3, min_tokens_to_keep=k),
        )
        for k in (1, 7)
    ],
]
NAMES = [type(processor).__name__ + "-" + str(i) for i, (_, processor) in enumerate(TRUNCATIONS)]


def dummy_ids(batch):
    return torch.zeros(batch, 1, dtype=torch.long)


@pytest.mark.parametrize("pair", TRUNCATIONS, ids=NAMES)
def test_truncations_and_temperature_equal_transformers(pair):
    ours, theirs = pair
    for logits in logit_sets():
        before = logits.clone()
        expected = theirs(dummy_ids(logits.shape[0]), logits.clone())
        got = ours(logits)
        assert torch.equal(got, expected), type(theirs).__name__
        assert torch.equal(logits, before), "a transform must not change its input"


@pytest.mark.slow
@pytest.mark.parametrize("pair", TRUNCATIONS, ids=NAMES)
def test_truncations_equal_transformers_on_real_logits(pair, real_logits):
    ours, theirs = pair
    assert torch.equal(ours(real_logits), theirs(dummy_ids(2), real_logits.clone()))


PROMPT_IDS = torch.tensor([[5, 9, 5, 7, 9, 5, 3, 3], [1, 2, 3, 1, 2, 3, 1, 2], [60, 61, 62, 63, 0, 1, 2, 60]])


@pytest.mark.parametrize("penalty", [1e-3, 0.5, 1.0, 1.3, 100.0])
def test_repetition_penalty_equals_transformers(penalty):
    for logits in [random_logits(3), tied_logits()]:
        expected = hf.RepetitionPenaltyLogitsProcessor(penalty)(PROMPT_IDS, logits.clone())
        assert torch.equal(sampling.repetition_penalty(logits, PROMPT_IDS, penalty), expected)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 9])
def test_no_repeat_ngram_equals_transformers(n):
    logits = random_logits(4)
    expected = hf.NoRepeatNGramLogitsProcessor(n)(PROMPT_IDS, logits.clone())
    assert torch.equal(sampling.no_repeat_ngram(logits, PROMPT_IDS, n), expected)


def test_no_repeat_ngram_bans_what_followed_the_last_tokens():
    # "1 2" was followed by 3
    out = sampling.no_repeat_ngram(torch.zeros(1, 10), torch.tensor([[1, 2, 3, 1, 2]]), 3)
    assert torch.isinf(out[0, 3]) and torch.isfinite(out[0, [0, 1, 2, 4]]).all()


def test_logit_bias_equals_transformers_sequence_bias():
    bias = {3: 5.0, 10: -100.0, 63: 0.25}
    logits = random_logits(5)
    expected = hf.SequenceBiasLogitsProcessor([[[t], b] for t, b in bias.items()])(PROMPT_IDS, logits.clone())
    assert torch.equal(sampling.logit_bias(logits, bias), expected)


def test_ban_tokens_equals_transformers_bad_words():
    logits = tied_logits()
    expected = hf.NoBadWordsLogitsProcessor([[0], [7], [33]])(PROMPT_IDS, logits.clone())
    assert torch.equal(sampling.ban_tokens(logits, [0, 7, 33]), expected)


@pytest.mark.parametrize("generated", [0, 2, 5])
def test_min_new_tokens_equals_transformers(generated):
    ids = torch.cat([PROMPT_IDS, torch.ones(3, generated, dtype=torch.long)], dim=1)
    processor = hf.MinNewTokensLengthLogitsProcessor(PROMPT_IDS.shape[1], 3, [2, 7])
    logits = random_logits(6)
    assert torch.equal(
        sampling.min_new_tokens_filter(logits, generated, 3, [2, 7]), processor(ids, logits.clone())
    )


def test_presence_and_frequency_penalties_follow_openais_formula():
    """logit[j] - count[j] * frequency - (count[j] > 0) * presence (transformers has no equivalent)."""
    logits = random_logits(7, batch=1)
    generated = torch.tensor([[4, 4, 4, 9, 12, 12]])
    out = sampling.presence_frequency_penalty(logits, generated, presence=0.5, frequency=0.25)
    expected = logits.clone()
    for token, count in {4: 3, 9: 1, 12: 2}.items():
        expected[0, token] -= count * 0.25 + 0.5
    assert torch.allclose(out, expected, atol=1e-6)
    untouched = [j for j in range(V) if j not in (4, 9, 12)]
    assert torch.equal(out[0, untouched], logits[0, untouched])
    encouraged = sampling.presence_frequency_penalty(logits, generated, presence=-1.0)
    assert encouraged[0, 4] == logits[0, 4] + 1.0


def test_greedy_and_sample_are_the_only_choosers():
    probs = torch.tensor([[0.0, 1.0, 0.0]])
    assert sampling.greedy(torch.log(probs)).tolist() == [1]
    assert sampling.sample(probs, torch.Generator().manual_seed(0)).tolist() == [1]
    with pytest.raises(TypeError, match="torch.Generator"):
        sampling.sample(probs, 0)


# --- invariants (hypothesis) ---------------------------------------------------------------------

finite_logits = st.lists(st.floats(-30, 30, allow_nan=False, width=32), min_size=2, max_size=40).map(
    lambda values: torch.tensor([values])
)
probability = st.floats(0.001, 1.0)

ALL_TRANSFORMS = {
    "top_k": lambda x, q: sampling.top_k_filter(x, max(1, int(q * 10))),
    "top_p": lambda x, q: sampling.top_p_filter(x, q),
    "min_p": lambda x, q: sampling.min_p_filter(x, q),
    "typical": lambda x, q: sampling.typical_filter(x, min(q, 0.999)),
    "epsilon": lambda x, q: sampling.epsilon_filter(x, min(q, 0.999)),
    "eta": lambda x, q: sampling.eta_filter(x, min(q, 0.999)),
    "temperature": lambda x, q: sampling.apply_temperature(x, q),
    "repetition": lambda x, q: sampling.repetition_penalty(x, torch.tensor([[0, 1]]), 1 + 10 * q),
    "presence_frequency": lambda x, q: sampling.presence_frequency_penalty(
        x, torch.tensor([[0, 0]]), 2 * q, 2 * q
    ),
    "no_repeat_ngram": lambda x, q: sampling.no_repeat_ngram(x, torch.tensor([[0, 1, 0]]), 2),
}


@settings(max_examples=60, deadline=None)
@given(logits=finite_logits, q=probability, name=st.sampled_from(sorted(ALL_TRANSFORMS)))
def test_every_transform_keeps_at_least_one_token(logits, q, name):
    out = ALL_TRANSFORMS[name](logits, q)
    assert out.shape == logits.shape
    assert torch.isfinite(out).any()
    assert not torch.isnan(out).any()


@settings(max_examples=100, deadline=None)
@given(logits=finite_logits, p=probability)
def test_top_p_keeps_the_smallest_set_whose_mass_reaches_p(logits, p):
    probs = logits.softmax(-1)[0].double()
    kept = torch.isfinite(sampling.top_p_filter(logits, p))[0]
    mass = float(probs[kept].sum())
    tolerance = 1e-5  # float32 softmax and cumsum
    assert mass >= p - tolerance  # the kept set reaches p ...
    assert bool(probs[kept].min() >= probs[~kept].max()) if (~kept).any() else True  # ... is a head ...
    if kept.sum() > 1:  # ... and is the smallest: without its least likely token it falls short of p
        assert mass - float(probs[kept].min()) < p + tolerance


@settings(max_examples=100, deadline=None)
@given(logits=finite_logits, k=st.integers(1, 50))
def test_top_k_keeps_k_tokens_or_the_ties_of_the_kth(logits, k):
    kept = torch.isfinite(sampling.top_k_filter(logits, k))[0]
    n = logits.shape[-1]
    assert kept.sum() >= min(k, n)
    if kept.sum() > min(k, n):  # only ties with the k-th best can make it more
        kth = logits[0].topk(min(k, n)).values[-1]
        assert bool((logits[0][kept] >= kth).all()) and int((logits[0] == kth).sum()) > 1


@settings(max_examples=100, deadline=None)
@given(logits=finite_logits, min_p=st.floats(0.0, 1.0))
def test_min_p_keeps_exactly_the_tokens_above_the_scaled_threshold(logits, min_p):
    probs = logits.softmax(-1)[0]
    kept = torch.isfinite(sampling.min_p_filter(logits, min_p))[0]
    expected = probs >= min_p * probs.max()
    expected[probs.argmax()] = True
    assert torch.equal(kept, expected)


@settings(max_examples=50, deadline=None)
@given(logits=finite_logits, t=st.floats(0.05, 20.0))
def test_temperature_keeps_the_ranking(logits, t):
    assert torch.equal(sampling.apply_temperature(logits, t).argmax(-1), logits.argmax(-1))


def test_truncation_never_changes_the_logits_it_keeps():
    logits = random_logits(8)
    for transform in (
        lambda x: sampling.top_k_filter(x, 5),
        lambda x: sampling.top_p_filter(x, 0.8),
        lambda x: sampling.min_p_filter(x, 0.1),
        lambda x: sampling.typical_filter(x, 0.5),
    ):
        out = transform(logits)
        kept = torch.isfinite(out)
        assert torch.equal(out[kept], logits[kept]) and math.isinf(float(out[~kept].max()))


@pytest.mark.parametrize("scale", [8.65e193, 1e39, 1e-39, 5e-324, 1e-200])
def test_an_extreme_temperature_or_penalty_leaves_a_distribution(scale):
    """float32 would turn these scales into inf or 0, and a masked -inf logit into NaN: the sampler would
    crash inside torch.multinomial. Clamped into [1e-30, 1e30], every row is still a distribution."""
    logits = sampling.top_k_filter(tied_logits(), 3)  # -inf entries, as a truncation leaves them
    seen = torch.tensor([[0, 3]] * len(logits))
    for scaled in (
        sampling.apply_temperature(logits, scale),
        sampling.repetition_penalty(logits, seen, scale),
    ):
        probs = torch.softmax(scaled, dim=-1)
        assert not probs.isnan().any(), f"scale {scale} left NaN probabilities"
        assert torch.allclose(probs.sum(-1), torch.ones(len(probs)))
        torch.multinomial(probs, 1)  # what a sampler does next: raises on NaN, inf or negative entries
