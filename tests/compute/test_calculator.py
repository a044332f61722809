"""The calculator tool of notebook 14: labkit works out what the model writes, exactly, and refuses anything
but numbers, + - * / and parentheses without running it; the call is read back out of the model's text; the
prompt shows worked calls. One slow test: SmolLM2 under the required-call grammar copies the sum it is asked."""

import json

import pytest

import labkit
from labkit.compute.calculator import (
    CALCULATOR,
    MAX_LENGTH,
    calculator_answer,
    calculator_messages,
    calculator_prompt,
    evaluate,
    run_call,
)
from labkit.compute.verifiable import SHOTS, load_task
from labkit.decoding.tools import ToolCall


def call_text(expression: str) -> str:
    call = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
    return f"<tool_call>\n{call}\n</tool_call>"


@pytest.mark.parametrize(
    "expression, value",
    [
        ("24 + 5", "29"),
        ("(1 + 2) * 3 / 4", "2.25"),
        ("7 / 3", "2.333333"),
        ("-3 - 4", "-7"),
        ("0.1 + 0.2", "0.3"),
        ("10 / 4 * 2", "5"),
        (" 2*(3+4) ", "14"),
        ("1 - 1", "0"),
        ("+5", "5"),
    ],
)
def test_evaluate_is_exact_and_writes_answers_as_the_task_does(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    "expression, match",
    [
        ("__import__('os').system('true')", "not Call"),
        ("x + 1", "not Name"),
        ("2 ** 10", "not BinOp"),
        ("(1).real", "not Attribute"),
        ("1 / 0", "division by zero"),
        ("1 +", "not arithmetic"),
        ("1 + 1" * 20, f"1 to {MAX_LENGTH}"),
        ("", "1 to"),
        ("'a' + 'b'", "not Constant"),
        ("[1, 2]", "not List"),
    ],
)
def test_evaluate_refuses_everything_but_arithmetic(expression, match):
    with pytest.raises(ValueError, match=match):
        evaluate(expression)
    with pytest.raises(TypeError, match="expression"):
        evaluate(29)


def test_a_call_is_read_back_and_evaluated():
    assert calculator_answer(call_text("24 + 5")) == "29"
    assert calculator_answer(call_text("1 / 0")) is None  # the tool says "error: ..."; no answer
    assert calculator_answer("29") is None and calculator_answer("") is None  # no call at all
    assert run_call(ToolCall("call_1", "calculator", {"expression": "2 * 3"}, "{}")) == "6"
    assert run_call(ToolCall("call_1", "calculator", {"expression": "x"}, "{}")).startswith("error: ")


def test_the_grammar_requires_exactly_one_call_with_an_arithmetic_expression():
    grammar = CALCULATOR.grammar()
    assert grammar.startswith("start: call\n") and '"pattern"' in grammar and "calls" not in grammar


def test_messages_show_one_worked_call_per_shot_then_ask(tokenizer):
    messages = calculator_messages("What is 24 + 5?")
    calls = [m for m in messages if m.get("tool_calls")]
    assert len(calls) == len(SHOTS) and messages[-1] == {"role": "user", "content": "What is 24 + 5?"}
    assert [m["content"] for m in messages if m["role"] == "tool"] == [answer for _, answer in SHOTS]
    assert calculator_messages("What is 24 + 5?", shots=()) == [messages[-1]]
    text = tokenizer.decode(calculator_prompt(tokenizer, "What is 24 + 5?"))
    assert '"name": "calculator"' in text and "<tool_response>\n9\n</tool_response>" in text
    assert text.endswith("What is 24 + 5?<|im_end|>\n<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="question"):
        calculator_messages("  ")


@pytest.mark.slow
def test_smollm2_copies_the_sum_into_a_required_call(smollm2):
    model, tokenizer = smollm2
    for item in load_task("sums")[:3]:
        text = labkit.generate_text(
            model,
            tokenizer,
            calculator_prompt(tokenizer, f"What is {item.question}?"),
            grammar=CALCULATOR.grammar(),
            max_new_tokens=40,
            temperature=0,
        )
        assert json.loads(text.split("\n")[1])["arguments"]["expression"] == item.question
        assert calculator_answer(text) == item.answer
