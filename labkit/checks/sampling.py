"""Exercise checkers for sampling and what lies beyond it, notebooks 04-05 (see labkit/checks/foundation.py
for the style).

    >>> checks.check_top_k_filter(my_top_k)
    ✅ Correct: your top-k matches labkit.decoding.sampling.top_k_filter (ties included).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from labkit.checks.common import not_attempted, run_student, verdict
from labkit.decoding.diversity import distinct_n
from labkit.decoding.mbr import chrf, mbr_select, token_f1
from labkit.decoding.mirostat import mirostat_update, mirostat_v2_filter, surprise_bits
from labkit.decoding.sampling import sample, top_k_filter, top_p_filter

__all__ = [
    "check_top_k_filter", "check_top_p_filter", "check_distinct_n", "check_tail_share", "check_mirostat_step",
    "check_mbr_select", "check_mean_surprise",
]


def _test_logits() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ties = torch.tensor([[3.0, 1.0, 3.0, 2.0, 2.0, 2.0, 0.0, -1.0]])
    return [torch.randn(2, 50, generator=generator) * 2, ties]


def check_top_k_filter(function: Callable | None) -> bool:
    """Exercise (04): top_k(logits [B, V], k) -> logits with all but the k highest set to -inf."""
    if function is None:
        return not_attempted("your function top_k(logits, k)")
    for logits in _test_logits():
        for k in (1, 3, 5):
            got, error = run_student(function, logits.clone(), k)
            if error:
                return verdict(False, error)
            expected = top_k_filter(logits, k)
            if not isinstance(got, torch.Tensor) or got.shape != logits.shape:
                return verdict(False, f"return a tensor of the same shape as the logits {tuple(logits.shape)}.")
            if not torch.equal(torch.isfinite(got), torch.isfinite(expected)):
                n_kept, n_right = int(torch.isfinite(got).sum()), int(torch.isfinite(expected).sum())
                which = (f"the logits {logits.tolist()}" if logits.numel() <= 10 else
                         f"random logits of shape {tuple(logits.shape)}")
                how = ("too few: a token tied with the k-th largest logit stays too" if n_kept < n_right else
                       "too many: only the k largest logits (and ties with the k-th) stay" if n_kept > n_right else
                       "the right number of tokens, but not the largest ones")
                return verdict(False, f"with k={k} on {which}, you keep {how}. Hint: compare with the k-th "
                                       "largest value (logits.topk(k).values[..., -1:]), so ties with it stay.")
            if not torch.equal(got[torch.isfinite(got)], logits[torch.isfinite(got)]):
                return verdict(False, "the kept logits changed: a filter only masks, it never rescales.")
    return verdict(True, "your top-k matches labkit.decoding.sampling.top_k_filter (ties included).")


def check_top_p_filter(function: Callable | None) -> bool:
    """Exercise (04): top_p(logits [B, V], p) -> logits with only the smallest head of mass >= p kept."""
    if function is None:
        return not_attempted("your top-p function (logits, p) -> logits")
    for logits in _test_logits()[:1]:
        for p in (0.1, 0.5, 0.9):
            got, error = run_student(function, logits.clone(), p)
            if error:
                return verdict(False, error)
            if not isinstance(got, torch.Tensor) or got.shape != logits.shape:
                return verdict(False, f"return a tensor of the same shape as the logits {tuple(logits.shape)}.")
            expected = torch.isfinite(top_p_filter(logits, p))
            kept = torch.isfinite(got)
            if not torch.equal(kept, expected):
                mass = float(torch.softmax(logits, -1)[kept].sum() / logits.shape[0])
                if torch.equal(kept.sum(-1), expected.sum(-1)):
                    return verdict(False, f"with p={p} you keep the right number of tokens in each row, but not the "
                                           f"most likely ones: they hold {mass:.2f} of the mass per row on average. "
                                           "In which order is your mask, and in which order are the logits?")
                return verdict(False, f"with p={p} your kept set holds {mass:.2f} of the mass per row on average. "
                                       "Keep the most likely tokens until their cumulative probability first "
                                       "reaches p, including the token that crosses p.")
    return verdict(True, "your nucleus matches labkit.decoding.sampling.top_p_filter.")


def check_distinct_n(function: Callable | None) -> bool:
    """Exercise (04): distinct_n(texts, n) -> unique word n-grams / all word n-grams, pooled."""
    if function is None:
        return not_attempted("your function distinct_n(texts, n)")
    cases = [(["a b a b", "a b c"], 2), (["the cat sat on the mat"], 1), (["x y z", "x y z"], 3)]
    for texts, n in cases:
        got, error = run_student(function, texts, n)
        if error:
            return verdict(False, error)
        expected = distinct_n(texts, n)
        if not isinstance(got, (int, float)) or abs(got - expected) > 1e-9:
            per_text = sum(distinct_n([text], n) for text in texts) / len(texts)
            how = ("that is the mean of each text's own ratio" if isinstance(got, (int, float)) and
                   abs(got - per_text) < 1e-9 else "that is not unique / all")
            return verdict(False, f"distinct_n({texts!r}, {n}) gave {got!r}: {how}. Pool the word n-grams of all "
                                   "texts first, then divide the number of unique ones by the number of all.")
    return verdict(True, "distinct-n measures how rarely phrases repeat.")


def check_tail_share(answer: float | None, steps, p: float = 0.9) -> bool:
    """Exercise (04): the share of sampled tokens that top_p=p would have cut at their step.
    steps: `labkit.generate(..., return_logits=True)`'s steps (each with .logits [V] and .token_id)."""
    if answer is None:
        return not_attempted("a share between 0 and 1")
    steps = list(steps)
    if not steps or any(getattr(step, "logits", None) is None for step in steps):
        return verdict(False, "every step needs its logits: generate with return_logits=True.")
    try:
        value = float(answer)
    except (TypeError, ValueError):
        return verdict(False, f"give a number, not {type(answer).__name__}.")
    cut, cut_mass = 0, 0.0
    for step in steps:
        logits = step.logits.detach().float().reshape(1, -1)
        kept = torch.isfinite(top_p_filter(logits, p))[0]
        cut += not bool(kept[step.token_id])
        cut_mass += float(logits.softmax(-1)[0][~kept].sum())
    n = len(steps)
    share, mean_cut = cut / n, cut_mass / n
    if abs(value - share) <= 0.5 / n:
        rate = f"one token in {1 / share:.0f}" if cut else "none of them"
        return verdict(True, f"{cut} of {n} sampled tokens ({share:.0%}) came from the tail that top_p={p} cuts: "
                             f"{rate}. That tail held {mean_cut:.0%} of the probability per step on average, so "
                             "plain sampling draws it about as often as its mass says, and a long text almost surely "
                             "holds a few such tokens. Truncation removes exactly these draws.")
    hints = [
        (abs(value - (1 - share)) <= 0.5 / n, "that is the share of tokens inside the nucleus; count those outside "
                                              "it, the ones top_p would have cut."),
        (value > 1 and abs(value / 100 - share) <= 0.5 / n, "that looks like a percentage: give a share between "
                                                             "0 and 1."),
        (value > 1 and float(value).is_integer(), "that looks like a count: divide by the number of steps."),
        (abs(value - mean_cut) <= 0.005, "that is the probability mass the nucleus cuts per step, what you would "
                                         "expect to draw; count the sampled tokens that actually fell outside it."),
    ]
    for matched, hint in hints:
        if matched:
            return verdict(False, hint)
    return verdict(False, f"not yet. For each step, apply top_p_filter to step.logits[None] with p={p} and ask "
                           "whether step.token_id is still finite; the share is the number cut over the number of "
                           "steps.")


# --- notebook 05: write the pieces of Mirostat and MBR, then measure Mirostat ---------------------------


def _mirostat_step(logits: torch.Tensor, tau: float, eta: float, mu: float,
                   generator: torch.Generator) -> tuple[int, float]:
    """labkit's Mirostat v2 step, as mirostat_generate runs it: truncate, sample, update mu."""
    probs = mirostat_v2_filter(logits, mu).softmax(dim=-1)
    token = int(sample(probs, generator)[0])
    return token, mirostat_update(mu, float(surprise_bits(probs[0, token])), tau, eta)


def _copy(generator: torch.Generator) -> torch.Generator:
    twin = torch.Generator()
    twin.set_state(generator.get_state())
    return twin


def _mirostat_mu_hint(got_mu: float, logits: torch.Tensor, token: int, tau: float, eta: float, mu: float) -> str:
    """Which slip gives the student's new mu, when the token was right."""
    kept = mirostat_v2_filter(logits, mu).softmax(dim=-1)[0, token]
    whole = logits.softmax(dim=-1)[0, token]
    surprise, surprise_whole = float(surprise_bits(kept)), float(surprise_bits(whole))
    slips = [
        (mu - eta * (float(-kept.log()) - tau), "surprise is in bits: -log2 p, not the natural log."),
        (mu - eta * (surprise_whole - tau), "the surprise must come from the distribution you sample from: the "
                                            "one cut at mu (tokens more surprising than mu removed), "
                                            "renormalised."),
        (mu + eta * (surprise - tau), "mu moved the wrong way: a token more surprising than tau must lower mu, so "
                                      "fewer surprising tokens pass next time."),
        (mu - (surprise - tau), "mu moves by eta times the error (surprise - tau), not by the whole error."),
    ]
    for wrong, hint in slips:
        if math.isclose(got_mu, wrong, rel_tol=1e-4, abs_tol=1e-6):
            return hint
    return "the right token, but not the controller's new mu: mu - eta * (surprise - tau), surprise in bits."


def check_mirostat_step(function: Callable | None) -> bool:
    """Exercise (05): mirostat_step(logits [1, V], tau, eta, mu, generator) -> (token_id, new_mu), one step of
    Mirostat v2; checked against labkit's mirostat_generate step by step, with the same seeded generator."""
    if function is None:
        return not_attempted("your function mirostat_step(logits, tau, eta, mu, generator)")
    table = torch.randn(16, 1, 50, generator=torch.Generator().manual_seed(3)) * 2.5  # 16 steps' logits
    for seed, (tau, eta) in enumerate([(3.0, 0.1), (1.5, 0.5), (4.0, 1.0)]):
        mine, theirs = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        mu = mu_theirs = 2 * tau
        for logits in table:
            before = _copy(mine)
            got, error = run_student(function, logits.clone(), tau, eta, mu, mine)
            if error:
                return verdict(False, error)
            expected_token, expected_mu = _mirostat_step(logits, tau, eta, mu_theirs, theirs)
            try:
                token, new_mu = int(got[0]), float(got[1])
            except (TypeError, ValueError, IndexError):
                return verdict(False, "return a pair: (the sampled token id, the new mu).")
            if token != expected_token:
                whole = int(sample(logits.softmax(dim=-1), _copy(before))[0])
                if token == whole:
                    return verdict(False, "that token was drawn from the whole distribution: first cut the tokens "
                                           "whose surprise -log2 p exceeds mu (the most likely one always stays), "
                                           "then renormalise and draw.")
                if token == int(logits.argmax()):
                    return verdict(False, "that is the most likely token: Mirostat samples among the kept tokens, "
                                           "with sampling.sample(probs, generator).")
                return verdict(False, "not the token labkit's Mirostat draws with the same generator. Keep the tokens "
                                       "whose surprise -log2 p is at most mu (and always the most likely one), "
                                       "renormalise with a softmax, and draw once with sampling.sample(probs, "
                                       "generator).")
            if not math.isclose(new_mu, expected_mu, rel_tol=1e-4, abs_tol=1e-6):
                return verdict(False, _mirostat_mu_hint(new_mu, logits, token, tau, eta, mu))
            mu, mu_theirs = new_mu, expected_mu
    return verdict(True, "truncate by surprise, draw, and move mu against the error: your steps follow labkit's "
                         "Mirostat token for token.")


def _mbr_sets() -> list[tuple[list[str], Callable[[str, str], float]]]:
    """Candidate sets with a similarity each, on which the usual slips pick another candidate."""
    def shared_words(a: str, b: str) -> float:  # a utility whose self-similarity grows with the length
        return float(len(set(a.lower().split()) & set(b.lower().split())))

    return [
        (["Paris is the capital.", "The capital is Paris.", "It is Lyon, I think."], chrf),
        (["The sky is blue because air scatters blue light.", "Blue light is scattered more by the air.",
          "The sky looks blue since air scatters short waves.", "Because of the ocean's reflection.",
          "The sea makes the sky blue."], chrf),
        (["Paris.", "Paris is the capital of France.", "The capital of France is Paris, a city on the Seine.",
          "France's capital is Paris."], chrf),
        (["a red car", "the red car", "a blue bike", "the red bus", "red"], token_f1),
        (["the cat sat", "the cat sat on the warm mat by the door", "a cat sat down", "the dog ran",
          "the cat sat on a mat"], shared_words),
    ]


def check_mbr_select(function: Callable | None) -> bool:
    """Exercise (05): mbr_pick(candidates, similarity) -> the candidate with the highest mean
    similarity(candidate, other) over the other candidates (ties: the first)."""
    if function is None:
        return not_attempted("your function mbr_pick(candidates, similarity)")
    for candidates, similarity in _mbr_sets():
        got, error = run_student(function, list(candidates), similarity)
        if error:
            return verdict(False, error)
        n = len(candidates)
        best = mbr_select(candidates, similarity)[0]
        if got == candidates[best]:
            continue
        if isinstance(got, int) and not isinstance(got, bool):
            return verdict(False, "return the candidate text itself, not its position.")
        if got not in candidates:
            return verdict(False, "return one of the candidates, unchanged.")

        def pick(score: Callable[[int], float]) -> str:
            return candidates[max(range(n), key=lambda i: (score(i), -i))]

        others = [[j for j in range(n) if j != i] for i in range(n)]
        slips = [
            (pick(lambda i: sum(similarity(candidates[i], candidates[j]) for j in range(n))),
             "a candidate's similarity to itself says nothing about agreement: average over the *other* "
             "candidates only."),
            (pick(lambda i: -sum(similarity(candidates[i], candidates[j]) for j in others[i])),
             "that is the candidate the others agree with least: MBR keeps the highest expected similarity."),
            (pick(lambda i: max(similarity(candidates[i], candidates[j]) for j in others[i])),
             "that candidate has the single closest neighbour; MBR averages the similarity over all the others."),
            (pick(lambda i: sum(similarity(candidates[j], candidates[i]) for j in others[i])),
             "call similarity(candidate, other): the candidate is the hypothesis, each other sample a reference."),
        ]
        hint = next((text for wrong, text in slips if got == wrong), "for each candidate, average "
                    "similarity(candidate, other) over the other candidates; return the one with the highest mean.")
        return verdict(False, f"on a set of {n} candidates: {hint}")
    return verdict(True, "the candidate the other samples agree with most, on every set and with every similarity.")


def check_mean_surprise(answer: float | None, run, skip: int = 10) -> bool:
    """Exercise (05): the mean surprise (bits) of a Mirostat run's tokens after the first `skip`."""
    if answer is None:
        return not_attempted("a number of bits")
    try:
        value = float(answer)
    except (TypeError, ValueError):
        return verdict(False, f"give a number of bits, not {type(answer).__name__}.")
    surprises = list(run.surprises)
    tail = surprises[skip:] or surprises
    expected = sum(tail) / len(tail)
    if abs(value - expected) <= 0.01:
        last = run.steps[-1]
        if expected < run.tau - 0.5:
            how = (f"the target was out of reach. Mirostat can only cut tokens, never add surprise, so mu kept rising "
                   f"(from {2 * run.tau:g} to {last.mu:.1f} bits) and cut less and less: the last step kept "
                   f"{last.kept:,} tokens. It behaves like plain sampling with a far tail cut.")
        else:
            how = f"the controller held the surprise near its target; mu ended at {last.mu:.1f} bits."
        return verdict(True, f"{expected:.2f} bits per token after the first {skip}, against tau = {run.tau:g}: {how}")
    hints = [
        (sum(surprises) / len(surprises), f"leave out the first {skip} tokens, where mu is still settling from its "
                                          "start at 2 tau."),
        (expected * math.log(2), "run.surprises is already in bits: average it as it is."),
        (expected / math.log(2), "run.surprises is already in bits: average it as it is."),
        (run.tau, "that is the target tau; average what the run's tokens measured (run.surprises)."),
    ]
    for wrong, hint in hints:
        if abs(value - wrong) <= 0.01:
            return verdict(False, hint)
    return verdict(False, f"not yet: the mean of run.surprises after the first {skip} tokens.")
