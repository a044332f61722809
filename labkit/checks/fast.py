"""Exercise checkers for how fast decoding can go, notebook 13 (see labkit/checks/foundation.py for the style).

>>> checks.check_bandwidth_use(bandwidth_use)
>>> checks.check_compile_break_even(compile_break_even)
>>> checks.check_accepted_guesses(accepted_guesses)
>>> checks.check_q4_inner_loop(GROUP_DOT)   # the capstone: a C++ loop, compiled with load_inline
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from labkit.checks.common import as_number, matching_hint, not_attempted, verdict
from labkit.checks.work import progressive, reset, run_own
from labkit.fast.dot_exercise import CompilerMissing, build_matvec
from labkit.fast.kernel import BUILD_ERRORS, short_reason
from labkit.fast.q4_linear import Q41Weight, pack_q4_1, q4_1_linear_reference, quantize_q4_1, unpack_q4_1
from labkit.fast.roofline import bandwidth_utilisation
from labkit.fast.static import break_even_tokens
from labkit.speculative.rule import accept_greedy

__all__ = [
    "check_accepted_guesses",
    "check_bandwidth_use",
    "check_compile_break_even",
    "check_q4_inner_loop",
    "judge_matvec",
]

# (bytes read per token, tokens/s, bandwidth in bytes/s): SmolLM2 in float32 on a laptop, then others
BANDWIDTH_CASES = [(538e6, 18.9, 26e9), (269e6, 45.0, 26e9), (4.5e9, 12.0, 1.0e11), (16e9, 150.0, 3.35e12)]
# (compile seconds, eager tokens/s, compiled tokens/s): the first two pay off, the last two never do
BREAK_EVEN_CASES = [
    (30.0, 20.0, 25.0),
    (12.0, 10.0, 40.0),
    (45.0, 18.0, 19.5),
    (5.0, 30.0, 30.0),
    (8.0, 25.0, 20.0),
]
# (guesses, what the model chose at each guess's position and after the last one)
GUESS_CASES = [
    ([4, 8, 15], [4, 8, 15, 16]),
    ([4, 8, 15], [5, 8, 15, 16]),
    ([4, 8, 15, 16], [4, 8, 9, 16, 23]),
    ([], [42]),
    ([7, 7, 7, 7], [7, 3, 7, 7, 7]),
]
# (N, K) of the weights the C++ group_dot is checked on: one group, three, and a SmolLM2 width
INNER_LOOP_SHAPES = [(7, 32), (13, 96), (64, 576)]
# what a wrong group_dot often computes instead -> the hint for it (codes [N, K] in input order)
NIBBLE_MISTAKES = {
    "the nibbles are swapped: the LOW nibble of c[j] is input j, the HIGH nibble is input j + 16": lambda codes: (
        codes.reshape(len(codes), -1, 2, 16).flip(2).reshape(codes.shape)
    ),
    "only the low nibbles count: each byte's high nibble is a code too, for input j + 16": lambda codes: (
        codes * (torch.arange(codes.shape[1]) % 32 < 16)
    ),
    "only the high nibbles count: each byte's low nibble is a code too, for input j": lambda codes: (
        codes * (torch.arange(codes.shape[1]) % 32 >= 16)
    ),
}


def _number(value) -> float | None:
    """The answer as a float, or None when it is not a number (a string, a bool, None, a list...): unlike
    common.as_number, a function must return the number itself, not its text."""
    return None if isinstance(value, (str, bytes, bool)) else as_number(value)


def check_bandwidth_use(fn: Callable | None) -> bool:
    """Exercise: fn(bytes_per_token, tokens_per_second, bandwidth_bytes_per_second) -> the fraction of the
    bandwidth a decode path uses (0.39, not 39 %). Calling labkit's own bandwidth_utilisation does not count."""
    if fn is None:
        return not_attempted("your function bandwidth_use(bytes_per_token, tokens_per_second, bandwidth)")
    for per_token, rate, bandwidth in BANDWIDTH_CASES:
        call = f"bandwidth_use({per_token:g}, {rate:g}, {bandwidth:g})"
        got, error = run_own(fn, per_token, rate, bandwidth, references=[bandwidth_utilisation])
        if error is not None:
            return verdict(False, f"{call}: {error}")
        expected = bandwidth_utilisation(per_token, rate, bandwidth)
        value = _number(got)
        if value is None:
            return verdict(False, f"{call} should return a number (a fraction), got {type(got).__name__}.")
        if math.isclose(value, expected, rel_tol=1e-6):
            continue
        if math.isclose(value, 100 * expected, rel_tol=1e-6):
            return verdict(
                False,
                f"{call} gave {value:.4g}: that is a percentage. Return the fraction, between 0 and "
                "1; format it as a percentage only when you print it.",
            )
        if math.isclose(value, 1 / expected, rel_tol=1e-6):
            return verdict(
                False,
                "upside down: the bytes read each second (bytes per token x tokens/s) go on top, "
                "the bandwidth below.",
            )
        if math.isclose(value, per_token / bandwidth, rel_tol=1e-6):
            return verdict(
                False,
                "you left out the tokens/s: the bytes read each second are bytes per token x "
                "tokens per second.",
            )
        return verdict(
            False,
            f"{call} gave {value:.4g}, which is not it. "
            + progressive(
                "bandwidth_use",
                [
                    "How many bytes does the path read each second, and what share of what the memory can give is that?",
                    "The share is bytes per token x tokens/s (the bytes read each second) / bandwidth.",
                ],
            ),
        )
    reset("bandwidth_use")
    return verdict(
        True,
        "bytes per token x tokens/s is the bandwidth a path uses; divided by what the memory "
        "can give, it says how close to the roofline it runs. The rest is overhead.",
    )


NEVER_PAYS = (
    "here the compiled path is no faster than eager: it saves nothing per token, so no number of "
    "tokens pays the compile time back. Return what the exercise asks for that case."
)


def _break_even_slip(value: float, call: str, case: tuple[float, float, float], expected: float) -> str:
    """The hint for a wrong, finite number of tokens: the plausible slip it matches, else a hint that grows
    per miss."""
    seconds, eager, compiled = case
    slips = [
        (
            seconds / (compiled - eager),
            f"{call} gave {value:.4g}: you subtracted tokens per second. What "
            "compiling saves is time per token: 1 / eager - 1 / compiled seconds.",
        ),
        (
            -expected,
            "the sign is flipped: the time saved per token is 1 / eager - 1 / compiled (the eager step "
            "takes longer).",
        ),
        (1 / expected, "upside down: divide the compile time by the seconds saved per token."),
    ]
    return matching_hint(
        value, slips, rel_tol=1e-6
    ) or f"{call} gave {value:.4g}, which is not it. " + progressive(
        "compile_break_even",
        [
            "Compiling costs time once and saves a little time on every token: after how many tokens do the "
            "savings add up to the cost?",
            "Compile seconds / the seconds saved per token, (1 / eager - 1 / compiled).",
        ],
    )


def _break_even_miss(fn: Callable, case: tuple[float, float, float]) -> str | None:
    """None when fn gets the break-even of case = (compile seconds, eager tokens/s, compiled tokens/s) right,
    else what is wrong with its answer."""
    call = "compile_break_even({:g}, {:g}, {:g})".format(*case)
    expected = break_even_tokens(*case)
    got, error = run_own(fn, *case, references=[break_even_tokens])
    if error is not None:
        if math.isinf(expected) and "ZeroDivisionError" in error:
            return f"{call} divided by zero: {NEVER_PAYS}"
        return f"{call}: {error}"
    value = _number(got)
    if value is None:
        return f"{call} should return a number of tokens (or math.inf), got {type(got).__name__}."
    if math.isinf(expected):
        return None if value == math.inf else f"{call} gave {value:.4g}: {NEVER_PAYS}"
    if math.isclose(value, expected, rel_tol=1e-6, abs_tol=1.0):  # rounding up to whole tokens is fine
        return None
    return _break_even_slip(value, call, case, expected)


def check_compile_break_even(fn: Callable | None) -> bool:
    """Exercise: fn(compile_seconds, eager_tokens_per_second, compiled_tokens_per_second) -> the number of
    tokens after which compiling pays for itself, math.inf when the compiled path is no faster. Calling labkit's
    own break_even_tokens does not count."""
    if fn is None:
        return not_attempted("your function compile_break_even(compile_seconds, eager_tps, compiled_tps)")
    for case in BREAK_EVEN_CASES:
        miss = _break_even_miss(fn, case)
        if miss is not None:
            return verdict(False, miss)
    reset("compile_break_even")
    return verdict(
        True,
        "compile seconds / seconds saved per token, and never (math.inf) when compiling saves "
        "nothing: a long-running server pays it back, a one-off script may not.",
    )


def _guesses_slip(
    call: str, guesses: list[int], chosen: list[int], accepted: object, tokens: list[int]
) -> str:
    """The hint for a wrong (accepted, new_tokens) from accepted_guesses(guesses, chosen): which count or
    which tokens went wrong, and how."""
    expected_accepted, choice = accept_greedy(guesses, chosen)
    expected_tokens = guesses[:expected_accepted] + [choice]
    if accepted != expected_accepted:
        if accepted == sum(g == c for g, c in zip(guesses, chosen)):
            return (
                f"for {call} you counted every matching position; a guess counts only if every guess before it "
                "was accepted too: stop at the first difference."
            )
        if accepted == len(expected_tokens):
            return f"for {call}: accepted counts guesses only; the model's own token is new but it is not a guess."
        return (
            f"for {call} you accepted {accepted!r} guesses: accept guesses[i] while it equals chosen[i], and "
            "stop at the first that does not."
        )
    if tokens in (chosen[:accepted], guesses[:accepted]):
        return (
            f"for {call}: after the accepted guesses add the model's own next token, chosen[accepted]: every "
            "verify call gives at least one new token."
        )
    if tokens == guesses[: accepted + 1]:
        return (
            f"for {call}: at the first mismatch keep the model's choice, chosen[accepted], not the rejected "
            "guess."
        )
    return (
        f"for {call} your new tokens are {tokens}: the accepted guesses, then the model's own choice after "
        "them, chosen[accepted]."
    )


def check_accepted_guesses(fn: Callable | None) -> bool:
    """Exercise: fn(guesses, chosen) -> (accepted, new_tokens) for greedy verification of g prompt-lookup
    guesses, where chosen holds the g + 1 tokens the model picked greedily at each guess's position and after
    the last one: accepted = the longest prefix with guesses[i] == chosen[i]; new_tokens = chosen[:accepted + 1].
    Calling labkit's own accept_greedy does not count."""
    if fn is None:
        return not_attempted("your function accepted_guesses(guesses, chosen)")
    for guesses, chosen in GUESS_CASES:
        call = f"accepted_guesses({guesses}, {chosen})"
        got, error = run_own(fn, list(guesses), list(chosen), references=[accept_greedy])
        if error is not None:
            empty = " With no guesses the model still gives its own next token." if not guesses else ""
            return verdict(False, f"{call}: {error}{empty}")
        try:
            accepted, tokens = got
            tokens = [int(t) for t in tokens]
        except (TypeError, ValueError):
            return verdict(False, f"{call} should return a pair (accepted, new_tokens), got {got!r}.")
        expected_accepted, choice = accept_greedy(guesses, chosen)
        if accepted != expected_accepted or tokens != guesses[:expected_accepted] + [choice]:
            return verdict(False, _guesses_slip(call, guesses, chosen, accepted, tokens))
    return verdict(
        True,
        "the longest agreeing prefix, plus the model's own next token: one verify call gives "
        "1 to g + 1 tokens, exactly those plain greedy decoding would.",
    )


def inner_loop_case(n: int, k: int, seed: int) -> tuple[Q41Weight, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return quantize_q4_1(torch.randn(n, k, generator=generator)), torch.randn(k, generator=generator)


def with_codes(weight: Q41Weight, codes: torch.Tensor) -> Q41Weight:
    """The same scales and minimums, other codes [N, K] in input order."""
    return Q41Weight(pack_q4_1(codes.to(torch.uint8)), weight.scales, weight.minimums, weight.shape)


def same_result(y: torch.Tensor, expected: torch.Tensor) -> bool:
    """Equal up to the order of float32 sums over groups."""
    return y.shape == expected.shape and bool(
        torch.allclose(y, expected, rtol=1e-4, atol=1e-4 * float(expected.abs().max()))
    )


def check_q4_inner_loop(group_dot: str | None) -> bool:
    """Capstone of notebook 13: group_dot, the C++ body of labkit.fast.dot_exercise.TEMPLATE's
    `group_dot(c, q)` (declare the sum, loop over the group's 16 bytes adding each byte's two 4-bit codes
    times q[j] and q[j + 16], return it), compiled into the template, must give the Q4_1 x Q8_1 product of
    labkit's reference on random weights of 1, 3 and 18 groups per row.
    Where no compiler is installed it says so and returns False (the exercise cannot run there)."""
    if group_dot is None or (isinstance(group_dot, str) and not group_dot.strip()):
        return not_attempted("the body of group_dot in C++, as a string: declare the sum, loop, return it")
    if not isinstance(group_dot, str):
        return verdict(
            False, f"group_dot's body is C++ source in a Python string, got {type(group_dot).__name__}."
        )
    try:
        matvec = build_matvec(group_dot)
    except CompilerMissing as missing:
        print(f"⏭️ Skipped: this machine cannot compile C++ ({missing}).")
        return False
    except BUILD_ERRORS as error:
        return verdict(False, f"it does not compile: {short_reason(error)}")
    return judge_matvec(matvec)


def judge_matvec(matvec: Callable[[Q41Weight, torch.Tensor], torch.Tensor]) -> bool:
    """The verdict on a compiled matvec(weight, x) -> y [N]: labkit's reference on every shape, or a hint."""
    for seed, (n, k) in enumerate(INNER_LOOP_SHAPES):
        weight, x = inner_loop_case(n, k, seed)
        y = matvec(weight, x)
        expected = q4_1_linear_reference(x[None], weight)[0]
        if same_result(y, expected):
            continue
        codes = unpack_q4_1(weight.codes)
        for hint, mistake in NIBBLE_MISTAKES.items():
            if same_result(y, q4_1_linear_reference(x[None], with_codes(weight, mistake(codes)))[0]):
                return verdict(False, f"on a {n} x {k} weight, {hint}.")
        error = float((y - expected).norm() / expected.norm())
        return verdict(
            False,
            f"on a {n} x {k} weight the result is off by {error:.1%} of its size (relative "
            "norm). "
            + progressive(
                "q4_inner_loop",
                [
                    "Each byte c[j] holds two 4-bit codes, for two different inputs of the group: "
                    "which bits hold which, and which input does each multiply?",
                    "The low 4 bits of c[j] are the code of input j, the high 4 bits the code of "
                    "input j + 16; add both products to the sum, over j = 0..15, and return it.",
                ],
            ),
        )
    reset("q4_inner_loop")
    return verdict(
        True, "your group_dot computes labkit's Q4_1 x Q8_1 product on 1, 3 and 18 groups per row."
    )
