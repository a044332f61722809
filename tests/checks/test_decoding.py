"""The decoding lab's measurement checker (notebook 03): a pass from the measured values, a hint otherwise."""

import math

from labkit import checks
from labkit.decoding.search import Hypothesis


def test_blocking_cost_takes_hypotheses_or_log_probabilities(capsys):
    looping, blocked = Hypothesis((1, 2), -25.7, -0.86), Hypothesis((3, 4), -29.7, -0.99)
    assert not checks.check_blocking_cost(None, looping, None)
    assert "Not attempted" in capsys.readouterr().out
    assert checks.check_blocking_cost(math.exp(4.0), looping, blocked)
    assert checks.check_blocking_cost(math.exp(4.0), -25.7, -29.7)
    assert not checks.check_blocking_cost(4.0, looping, blocked)
    assert "exponentiate" in capsys.readouterr().out
    assert not checks.check_blocking_cost(math.exp(-4.0), looping, blocked)
    assert "other way round" in capsys.readouterr().out
