"""Exercise checkers for what lies beyond sampling, notebook 05 (see labkit/checks/foundation.py for the style).
A function that calls labkit's own Mirostat pieces or MBR selection does not count; the reading of the Mirostat
run (did it reach its target, and why not) is a checked choice.

    >>> checks.check_mean_surprise(mean_surprise, run5, skip=10, reached=False, why="cut_only")
    ✅ Correct: 3.21 bits per token after the first 10, against tau = 5.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from labkit.checks.common import not_attempted, read_number, verdict
from labkit.checks.work import choice_miss, progressive, refuse_unmeasured, reset, run_own
from labkit.decoding.mbr import chrf, mbr_decode, mbr_select, token_f1
from labkit.decoding.mirostat import mirostat_update, mirostat_v2_filter, surprise_bits
from labkit.decoding.sampling import sample

__all__ = ["check_mirostat_step", "check_mbr_select", "check_mean_surprise"]


def _mirostat_step(
    logits: torch.Tensor, tau: float, eta: float, mu: float, generator: torch.Generator
) -> tuple[int, float]:
    """labkit's Mirostat v2 step, as mirostat_generate runs it: truncate, sample, update mu."""
    probs = mirostat_v2_filter(logits, mu).softmax(dim=-1)
    token = int(sample(probs, generator)[0])
    return token, mirostat_update(mu, float(surprise_bits(probs[0, token])), tau, eta)


def _copy(generator: torch.Generator) -> torch.Generator:
    twin = torch.Generator()
    twin.set_state(generator.get_state())
    return twin


def _mirostat_mu_hint(
    got_mu: float, logits: torch.Tensor, token: int, tau: float, eta: float, mu: float
) -> str:
    """Which slip gives the student's new mu, when the token was right."""
    kept = mirostat_v2_filter(logits, mu).softmax(dim=-1)[0, token]
    whole = logits.softmax(dim=-1)[0, token]
    surprise, surprise_whole = float(surprise_bits(kept)), float(surprise_bits(whole))
    slips = [
        (mu - eta * (float(-kept.log()) - tau), "surprise is in bits: -log2 p, not the natural log."),
        (
            mu - eta * (surprise_whole - tau),
            "the surprise must come from the distribution you sample from: the "
            "one cut at mu (tokens more surprising than mu removed), "
            "renormalised.",
        ),
        (
            mu + eta * (surprise - tau),
            "mu moved the wrong way: a token more surprising than tau must lower mu, so "
            "fewer surprising tokens pass next time.",
        ),
        (mu - (surprise - tau), "mu moves by eta times the error (surprise - tau), not by the whole error."),
    ]
    for wrong, hint in slips:
        if math.isclose(got_mu, wrong, rel_tol=1e-4, abs_tol=1e-6):
            return hint
    return "the right token, but not the controller's new mu: mu - eta * (surprise - tau), surprise in bits."


def _mirostat_token_hint(got_token: int, logits: torch.Tensor, before: torch.Generator) -> str:
    """Which slip draws the student's token when it is not labkit's: a draw from the whole distribution (with
    `before`, the generator as the step found it), the most likely token, else a hint that grows per miss."""
    whole = int(sample(logits.softmax(dim=-1), _copy(before))[0])
    if got_token == whole:
        return (
            "that token was drawn from the whole distribution: first cut the tokens whose surprise -log2 p "
            "exceeds mu (the most likely one always stays), then renormalise and draw."
        )
    if got_token == int(logits.argmax()):
        return (
            "that is the most likely token: Mirostat samples among the kept tokens, with "
            "sampling.sample(probs, generator)."
        )
    return "not the token labkit's Mirostat draws with the same generator. " + progressive(
        "mirostat_step",
        [
            "Cut by surprise first, then draw once from what is left, renormalised.",
            "Keep the tokens whose surprise -log2 p is at most mu (and always the most likely one), renormalise "
            "with a softmax, and draw once with sampling.sample(probs, generator).",
        ],
    )


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
            got, error = run_own(
                function,
                logits.clone(),
                tau,
                eta,
                mu,
                mine,
                references=[mirostat_v2_filter, mirostat_update, _mirostat_step],
            )
            if error:
                return verdict(False, error)
            expected_token, expected_mu = _mirostat_step(logits, tau, eta, mu_theirs, theirs)
            try:
                token, new_mu = int(got[0]), float(got[1])
            except (TypeError, ValueError, IndexError):
                return verdict(False, "return a pair: (the sampled token id, the new mu).")
            if token != expected_token:
                return verdict(False, _mirostat_token_hint(token, logits, before))
            if not math.isclose(new_mu, expected_mu, rel_tol=1e-4, abs_tol=1e-6):
                return verdict(False, _mirostat_mu_hint(new_mu, logits, token, tau, eta, mu))
            mu, mu_theirs = new_mu, expected_mu
    reset("mirostat_step")
    return verdict(
        True,
        "truncate by surprise, draw, and move mu against the error: your steps follow labkit's "
        "Mirostat token for token.",
    )


def _mbr_sets() -> list[tuple[list[str], Callable[[str, str], float]]]:
    """Candidate sets with a similarity each, on which the usual slips pick another candidate."""

    def shared_words(a: str, b: str) -> float:  # a utility whose self-similarity grows with the length
        return float(len(set(a.lower().split()) & set(b.lower().split())))

    return [
        (["Paris is the capital.", "The capital is Paris.", "It is Lyon, I think."], chrf),
        (
            [
                "The sky is blue because air scatters blue light.",
                "Blue light is scattered more by the air.",
                "The sky looks blue since air scatters short waves.",
                "Because of the ocean's reflection.",
                "The sea makes the sky blue.",
            ],
            chrf,
        ),
        (
            [
                "Paris.",
                "Paris is the capital of France.",
                "The capital of France is Paris, a city on the Seine.",
                "France's capital is Paris.",
            ],
            chrf,
        ),
        (["a red car", "the red car", "a blue bike", "the red bus", "red"], token_f1),
        (
            [
                "the cat sat",
                "the cat sat on the warm mat by the door",
                "a cat sat down",
                "the dog ran",
                "the cat sat on a mat",
            ],
            shared_words,
        ),
    ]


def check_mbr_select(function: Callable | None) -> bool:
    """Exercise (05): mbr_pick(candidates, similarity) -> the candidate with the highest mean
    similarity(candidate, other) over the other candidates (ties: the first)."""
    if function is None:
        return not_attempted("your function mbr_pick(candidates, similarity)")
    for candidates, similarity in _mbr_sets():
        got, error = run_own(function, list(candidates), similarity, references=[mbr_select, mbr_decode])
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
            (
                pick(lambda i: sum(similarity(candidates[i], candidates[j]) for j in range(n))),
                "a candidate's similarity to itself says nothing about agreement: average over the *other* "
                "candidates only.",
            ),
            (
                pick(lambda i: -sum(similarity(candidates[i], candidates[j]) for j in others[i])),
                "that is the candidate the others agree with least: MBR keeps the highest expected similarity.",
            ),
            (
                pick(lambda i: max(similarity(candidates[i], candidates[j]) for j in others[i])),
                "that candidate has the single closest neighbour; MBR averages the similarity over all the others.",
            ),
            (
                pick(lambda i: sum(similarity(candidates[j], candidates[i]) for j in others[i])),
                "call similarity(candidate, other): the candidate is the hypothesis, each other sample a reference.",
            ),
        ]
        hint = next(
            (text for wrong, text in slips if got == wrong),
            "for each candidate, average "
            "similarity(candidate, other) over the other candidates; return the one with the highest mean.",
        )
        return verdict(False, f"on a set of {n} candidates: {hint}")
    return verdict(
        True, "the candidate the other samples agree with most, on every set and with every similarity."
    )


REACH_WHY = {
    "cut_only": "Mirostat can only cut tokens, never add surprise: with nothing cut, the model's own "
    "surprise is all there is",
    "too_slow": "mu moves too slowly and would reach the target with more tokens",
    "cut_too_much": "the cut keeps too few tokens to be surprising",
}


def _reach_truth(run, expected: float) -> tuple[bool, str]:
    """Whether the run reached its target, and (when it did not) why, read from what mu and the cut did."""
    reached = expected >= run.tau - 0.5
    rising = run.steps[-1].mu > 2 * run.tau  # mu kept rising: the cut let ever more tokens through
    return reached, "cut_only" if rising else "too_slow"


def check_mean_surprise(
    answer: float | None, run, skip: int = 10, reached: bool | None = None, why: str | None = None
) -> bool:
    """Exercise (05): the mean surprise (bits) of a Mirostat run's tokens after the first `skip`; then whether
    it reached its target tau (reached: True or False) and, when it did not, why (one of REACH_WHY), both
    checked against the run's own steps."""
    value, refusal = read_number(answer, "a number of bits", number="a number of bits")
    if refusal is not None:
        return refusal
    unmeasured = refuse_unmeasured("run mirostat_generate(...), as the cell above does", run=run)
    if unmeasured is not None:
        return unmeasured
    surprises = list(run.surprises)
    tail = surprises[skip:] or surprises
    expected = sum(tail) / len(tail)
    if abs(value - expected) > 0.01:
        return verdict(False, _surprise_hint(value, expected, surprises, run.tau, skip))
    truth_reached, truth_why = _reach_truth(run, expected)
    if reached is None:
        return not_attempted("reached, True or False (your mean surprise is right)")
    if bool(reached) != truth_reached:
        return verdict(
            False, f"compare your mean with the target tau = {run.tau:g}: is it within half a bit?"
        )
    if not truth_reached:
        if why is None:
            return not_attempted(f"why, one of {sorted(REACH_WHY)} (reached is right)")
        miss = choice_miss(
            why,
            REACH_WHY,
            truth_why,
            "look at where mu went over the run and at how many tokens the last cut kept.",
        )
        if miss:
            return verdict(False, miss)
    reset("mean_surprise")
    return verdict(True, f"{expected:.2f} bits per token after the first {skip}, against tau = {run.tau:g}.")


def _surprise_hint(value: float, expected: float, surprises: list[float], tau: float, skip: int) -> str:
    """The hint for a wrong mean surprise: a recognised slip, else the idea, then the recipe."""
    hints = [
        (
            sum(surprises) / len(surprises),
            f"leave out the first {skip} tokens, where mu is still settling from its start at 2 tau.",
        ),
        (expected * math.log(2), "run.surprises is already in bits: average it as it is."),
        (expected / math.log(2), "run.surprises is already in bits: average it as it is."),
        (tau, "that is the target tau; average what the run's tokens measured (run.surprises)."),
    ]
    for wrong, hint in hints:
        if abs(value - wrong) <= 0.01:
            return hint
    return "not yet: " + progressive(
        "mean_surprise",
        [
            "average what the run's tokens measured, once mu has settled.",
            f"the mean of run.surprises after the first {skip} tokens.",
        ],
    )
