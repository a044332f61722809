"""Checkers of notebook 13 pass the worked solutions, give a hint for each common mistake, and never raise."""

import math

from labkit import checks
from labkit.fast.static import break_even_tokens


def bandwidth_use(bytes_per_token, tokens_per_second, bandwidth):  # the worked solution
    return bytes_per_token * tokens_per_second / bandwidth


def compile_break_even(compile_seconds, eager_tps, compiled_tps):  # the worked solution
    saved = 1 / eager_tps - 1 / compiled_tps
    return compile_seconds / saved if saved > 0 else math.inf


def accepted_guesses(guesses, chosen):  # the worked solution
    accepted = 0
    while accepted < len(guesses) and guesses[accepted] == chosen[accepted]:
        accepted += 1
    return accepted, chosen[: accepted + 1]


def test_bandwidth_use(capsys):
    assert checks.check_bandwidth_use(bandwidth_use)
    assert "Correct" in capsys.readouterr().out
    hints = {
        lambda b, r, w: 100 * b * r / w: "percentage",
        lambda b, r, w: w / (b * r): "upside down",
        lambda b, r, w: b / w: "left out the tokens/s",
        lambda b, r, w: b * r: "which is not it",
        lambda b, r, w: f"{b * r / w:.0%}": "should return a number",
        lambda b, r, w: b / 0: "raised ZeroDivisionError",
    }
    for wrong, hint in hints.items():
        assert not checks.check_bandwidth_use(wrong)
        assert hint in capsys.readouterr().out
    assert not checks.check_bandwidth_use(None)
    assert "Not attempted" in capsys.readouterr().out


def test_break_even_tokens():
    assert break_even_tokens(12.0, eager_tps=8.0, compiled_tps=16.0) == 192.0
    assert break_even_tokens(5.0, eager_tps=30.0, compiled_tps=30.0) == math.inf
    assert break_even_tokens(5.0, eager_tps=30.0, compiled_tps=20.0) == math.inf


def test_compile_break_even(capsys):
    assert checks.check_compile_break_even(compile_break_even)
    assert "Correct" in capsys.readouterr().out
    # whole tokens are fine
    assert checks.check_compile_break_even(
        lambda s, e, c: math.ceil(compile_break_even(s, e, c)) if c > e else math.inf
    )
    capsys.readouterr()
    hints = {
        lambda s, e, c: s / (c - e): "subtracted tokens per second",
        lambda s, e, c: s / (1 / e - 1 / c): "divided by zero",  # the equal rates case
        lambda s, e, c: s / (1 / e - 1 / c) if c != e else math.inf: "pays the compile time back",  # slower
        lambda s, e, c: s / (1 / c - 1 / e): "sign is flipped",
        lambda s, e, c: (1 / e - 1 / c) / s: "upside down",
        lambda s, e, c: s * e: "which is not it",
        lambda s, e, c: None: "should return a number",
        lambda s, e, c: s / e[0]: "raised TypeError",
    }
    for wrong, hint in hints.items():
        assert not checks.check_compile_break_even(wrong)
        assert hint in capsys.readouterr().out
    assert not checks.check_compile_break_even(None)
    assert "Not attempted" in capsys.readouterr().out


def test_accepted_guesses(capsys):
    assert checks.check_accepted_guesses(accepted_guesses)
    assert "Correct" in capsys.readouterr().out

    def every_match(guesses, chosen):
        accepted = sum(g == c for g, c in zip(guesses, chosen))
        return accepted, chosen[: accepted + 1]

    def no_own_token(guesses, chosen):
        accepted, tokens = accepted_guesses(guesses, chosen)
        return accepted, tokens[:accepted]

    def keeps_guess(guesses, chosen):
        accepted, _ = accepted_guesses(guesses, chosen)
        return accepted, guesses[:accepted] + chosen[accepted : accepted + 1] if accepted == len(
            guesses
        ) else guesses[: accepted + 1]

    def counts_own_token(guesses, chosen):
        accepted, tokens = accepted_guesses(guesses, chosen)
        return len(tokens), tokens

    def no_empty_case(guesses, chosen):
        return accepted_guesses(guesses, chosen) if guesses else guesses[0]

    hints = {
        every_match: "every matching position",
        no_own_token: "own next token",
        keeps_guess: "rejected guess",
        counts_own_token: "not a guess",
        no_empty_case: "With no guesses",
        lambda guesses, chosen: len(guesses): "should return a pair",
    }
    for wrong, hint in hints.items():
        assert not checks.check_accepted_guesses(wrong)
        assert hint in capsys.readouterr().out
    assert not checks.check_accepted_guesses(None)
    assert "Not attempted" in capsys.readouterr().out


GROUP_DOT = """
int32_t dot = 0;
for (int j = 0; j < 16; ++j) {
  dot += (c[j] & 15) * q[j] + (c[j] >> 4) * q[j + 16];
}
return dot;
"""  # the worked solution


def loop_in_python(inner):
    """matvec(weight, x) computing what TEMPLATE computes around `inner`(low codes, high codes, qx) -> dot
    per group: the wrong loops below, without a minute of compiling each."""
    from labkit.fast.q4_linear import quantize_q8_1

    def matvec(weight, x):
        qx, dx, sx = quantize_q8_1(x[None])
        n, k = weight.shape
        packed = weight.codes.reshape(n, k // 32, 16).long()
        q = qx.reshape(k // 32, 32)
        dots = inner(packed & 15, packed >> 4, q[:, :16], q[:, 16:])  # [N, G]
        return (weight.scales.float() * dx * dots + weight.minimums.float() * sx).sum(-1)

    return matvec


def test_q4_inner_loop_compiles_the_solution_and_skips_without_a_compiler(capsys, monkeypatch):
    """The one real compile (about 25 s, then cached by labkit for notebook 13's worked solution)."""
    from labkit.fast.dot_exercise import missing_tools

    assert not checks.check_q4_inner_loop(None) and "Not attempted" in capsys.readouterr().out
    assert not checks.check_q4_inner_loop(42) and "Python string" in capsys.readouterr().out
    if missing_tools():  # the checker must say so and not crash
        assert not checks.check_q4_inner_loop(GROUP_DOT)
        assert "Skipped" in capsys.readouterr().out
        return
    assert checks.check_q4_inner_loop(GROUP_DOT)
    assert "Correct" in capsys.readouterr().out
    monkeypatch.setenv("CXX", "false")  # a compiler that fails at once: the build's error, not a crash
    assert not checks.check_q4_inner_loop("return 1;") and "does not compile" in capsys.readouterr().out
    monkeypatch.setenv("PATH", "")  # no compiler, no ninja: a clear skip
    monkeypatch.setenv("CXX", "no-such-compiler")
    assert not checks.check_q4_inner_loop(GROUP_DOT)
    out = capsys.readouterr().out
    assert "Skipped" in out and "no-such-compiler" in out


def test_q4_inner_loop_hints(capsys):
    right = loop_in_python(lambda low, high, q0, q1: (low * q0 + high * q1).sum(-1))
    assert checks.judge_matvec(right) and "Correct" in capsys.readouterr().out
    hints = {
        "swapped": lambda low, high, q0, q1: (high * q0 + low * q1).sum(-1),
        "only the low nibbles": lambda low, high, q0, q1: (low * q0).sum(-1),
        "only the high nibbles": lambda low, high, q0, q1: (high * q1).sum(-1),
        "off by": lambda low, high, q0, q1: ((low + 16 * high) * q0).sum(-1),  # the whole byte times q[j]
    }
    for hint, inner in hints.items():
        assert not checks.judge_matvec(loop_in_python(inner))
        assert hint in capsys.readouterr().out, hint
