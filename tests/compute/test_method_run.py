"""Running a method over many items through the engine (notebook 14): every item gets its n samples, each
exactly what the request alone with seed + i generates; tokens, log-probabilities and cost are counted;
the frontier scores the first n samples of each item with every chooser and the oracle."""

import math

import pytest

from labkit.compute.accuracy import Accuracy
from labkit.compute.choose import ORACLE, Sample
from labkit.compute.method_run import (
    ItemSamples,
    Method,
    MethodRun,
    answer_after_thinking,
    frontier,
    frontier_table,
    run_method,
)
from labkit.compute.verifiable import Item, load_task
from labkit.decoding.generate import generate
from labkit.serving.engine import Engine

OPTIONS = {"temperature": 1.0, "top_k": 20, "max_new_tokens": 5, "seed": 3}


def prompt(item):
    return f"Q: {item.question} ="


@pytest.fixture(scope="module")
def items():
    return load_task("sums")[:3]


def test_every_item_gets_its_samples_each_the_request_alone(tiny, tokenizer, items, one_thread):
    method = Method("sampled", prompt, OPTIONS, read_answer=lambda text: text[:2])
    finished = []
    run = run_method(
        Engine(tiny, tokenizer, max_num_seqs=8, n_blocks=64), items, method, n=4, progress=finished.append
    )
    assert [one.item for one in run.items] == items and all(len(one.samples) == 4 for one in run.items)
    assert sum(finished) == 3 * 4
    for one in run.items:
        for index, got in enumerate(one.samples):
            steps = list(
                generate(tiny, tokenizer, prompt(one.item), **{**OPTIONS, "seed": OPTIONS["seed"] + index})
            )
            assert got.text == "".join(step.text for step in steps) and got.answer == got.text[:2]
            assert got.n_tokens == len(steps) == 5
            assert got.mean_logprob == pytest.approx(sum(s.logprob for s in steps) / len(steps), abs=1e-3)
    assert run.generated_tokens == 3 * 4 * 5 and run.tokens_per_item() == 20 and run.tokens_per_item(1) == 5
    assert run.prompt_tokens == sum(len(tokenizer(prompt(item))["input_ids"]) for item in items)
    assert run.wall_s > 0 and run.peak_blocks > 0 and "3 items x 4 sample(s)" in run.describe()


def fake_run(answers: list[list[str]], right: list[str]) -> MethodRun:
    """A run whose item i's samples give answers[i], each of 2 tokens."""
    items = tuple(
        ItemSamples(Item(f"{i} + 0", answer), tuple(Sample(a, a, 2, -1.0 - j) for j, a in enumerate(given)))
        for i, (given, answer) in enumerate(zip(answers, right))
    )
    return MethodRun("sampled", len(answers[0]), items, 10, 2 * sum(map(len, answers)), 1.0, 4)


def test_the_frontier_scores_the_first_n_samples_with_every_chooser_and_the_oracle():
    run = fake_run([["1", "2", "2", "2"], ["7", "5", "6", "6"]], right=["2", "5"])
    points = {(p.method, p.n): p for p in frontier(run, ns=(1, 2, 4))}
    assert points[("self-consistency", 4)].accuracy == Accuracy(1, 2)  # "2" wins, "6" beats the right "5"
    assert points[("best-of-n (log-prob)", 4)].accuracy == Accuracy(0, 2)  # the first sample scores best here
    assert points[(ORACLE, 1)].accuracy == Accuracy(0, 2) and points[(ORACLE, 2)].accuracy == Accuracy(2, 2)
    assert points[(ORACLE, 4)].tokens_per_item == 8 and points[(ORACLE, 1)].tokens_per_item == 2
    assert len(points) == 4 * 3 and "pass@n (oracle)" in frontier_table(list(points.values()))
    greedy = fake_run([["2"], ["6"]], right=["2", "5"])
    assert [(p.method, p.n, p.accuracy) for p in frontier(greedy, note="budget 0")] == [
        ("sampled", 1, Accuracy(1, 2))
    ]
    with pytest.raises(ValueError, match="n must be"):
        run.accuracy(lambda samples: samples[0].answer, n=5)


def test_a_thinking_answer_is_read_after_the_end_marker():
    assert answer_after_thinking("12 + 7 is 19</think> The answer is 20.") == "20"
    assert answer_after_thinking("12 + 7 is 19</think> I do not know.") is None
    assert answer_after_thinking("12 + 7 is 19") == "19"  # never closed: what it wrote


def test_bad_arguments_are_refused(tiny, tokenizer, items):
    engine = Engine(tiny, tokenizer, max_num_seqs=4, n_blocks=32)
    method = Method("greedy", prompt, {"max_new_tokens": 2})
    with pytest.raises(ValueError, match="n must be"):
        run_method(engine, items, method, n=5)
    with pytest.raises(ValueError, match="items"):
        run_method(engine, [], method)
    with pytest.raises(TypeError, match="method"):
        run_method(engine, items, "greedy")
    with pytest.raises(TypeError, match="engine"):
        run_method(tiny, items, method)
    assert math.isnan(MethodRun("x", 1, (), 0, 0, 0.0, 0).tokens_per_s)
