"""A calculator tool: the model writes the sum, labkit works it out (notebook 14, section 4).

A 135M model is poor at arithmetic but can copy "24 + 5" from a question. So offer it one tool,
`calculator(expression)`, and make the call *required* (OpenAI's `tool_choice: "required"`): the grammar of
labkit.decoding.tools lets the model write nothing but one call, `{"name": "calculator", "arguments":
{"expression": ...}}`, and the schema below lets the expression hold only digits, + - * /, parentheses, a
decimal point and spaces. labkit then evaluates it, and the result is the answer. A 135M model that was
never shown a tool call writes an empty expression; worked calls in the chat (the task's own worked sums,
`calculator_messages`) show it what to put there.

Evaluating text a model wrote is running untrusted input, so `evaluate` never calls `eval`: it parses the
expression with Python's `ast` and walks the tree itself, allowing numbers, + - * /, unary signs and
parentheses, nothing else (no names, calls, attributes, powers). The arithmetic is exact (fractions), and
the result is written as `verifiable.extract_answer` writes answers ("29", "-3", "2.5").

    >>> evaluate("24 + 5"), evaluate("(1 + 2) * 3 / 4"), evaluate("7 / 3")
    ('29', '2.25', '2.333333')
    >>> prompt = calculator_prompt(tokenizer, "What is 24 + 5?")        # the tool in the system message
    >>> text = labkit.generate_text(model, tokenizer, prompt, grammar=CALCULATOR.grammar(), max_new_tokens=40)
    >>> text, calculator_answer(text)
    ('<tool_call>\\n{"name": "calculator", "arguments": {"expression": "24 + 5"}}\\n</tool_call>', '29')
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction

from transformers import PreTrainedTokenizerBase

from labkit.compute.verifiable import SHOTS
from labkit.core.arguments import check_text
from labkit.core.doors import check_record
from labkit.decoding.tool_prompt import tool_chat_prompt
from labkit.decoding.tools import ToolCall, ToolSpec

MAX_LENGTH = 64  # characters of an expression: bounds the work, and the tokens the model may spend on it
DECIMALS = 6  # places a result that is not a whole number keeps (7 / 3 -> 2.333333)
OPERATIONS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
SIGNS = {ast.UAdd: operator.pos, ast.USub: operator.neg}

CALCULATOR_TOOL = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Work out an arithmetic expression with + - * / and parentheses, e.g. '24 + 5'.",
        "parameters": {
            "type": "object",
            "additionalProperties": False,
            "required": ["expression"],
            "properties": {
                "expression": {"type": "string", "pattern": r"^[0-9+\-*/(). ]+$", "maxLength": MAX_LENGTH}
            },
        },
    },
}
CALCULATOR = ToolSpec.from_openai([CALCULATOR_TOOL], tool_choice="required", parallel_tool_calls=False)
# The same tool, each turn free to call it or to answer (labkit.compute.agent.solve_with_tool)
CALCULATOR_AUTO = ToolSpec.from_openai([CALCULATOR_TOOL], tool_choice="auto", parallel_tool_calls=False)
# Worked two-step questions (none is in data/inference_compute/two_steps.jsonl): the second expression
# starts with the first one's result, which the model only knows by reading the tool's reply.
TWO_STEP_SHOTS = (
    ("Add 23 and 14, then multiply the result by 3.", ("23 + 14", "37 * 3")),
    ("Add 52 and 19, then multiply the result by 2.", ("52 + 19", "71 * 2")),
    ("Add 31 and 45, then multiply the result by 5.", ("31 + 45", "76 * 5")),
    ("Add 17 and 26, then multiply the result by 4.", ("17 + 26", "43 * 4")),
)
# What the assistant writes beside each call, and before its answer. Without them SmolLM2-135M repeats the
# first result as its answer (6 of 6 tried); with only the step words it never stops calling (6 of 6).
STEP_WORDS, DONE_WORDS = ("Step 1 of 2: add.", "Step 2 of 2: multiply."), "Both steps done: {}"


def value_of(node: ast.AST) -> Fraction:
    """The exact value of an expression tree of numbers, + - * /, unary signs and parentheses; a ValueError
    names the first thing that is not one of them."""
    if isinstance(node, ast.Expression):
        return value_of(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value))
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATIONS:
        left, right = value_of(node.left), value_of(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("division by zero")
        return OPERATIONS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in SIGNS:
        return SIGNS[type(node.op)](value_of(node.operand))
    raise ValueError(f"only numbers, + - * / and parentheses are allowed, not {type(node).__name__}")


def written(value: Fraction) -> str:
    """A value as extract_answer writes answers: no trailing zeros, at most DECIMALS places.

    >>> written(Fraction(29)), written(Fraction(5, 2)), written(Fraction(-1, 3))
    ('29', '2.5', '-0.333333')
    """
    if value.denominator == 1:
        return str(value.numerator)
    rounded = round(Decimal(value.numerator) / Decimal(value.denominator), DECIMALS)
    return "0" if rounded == 0 else format(rounded.normalize(), "f")


def evaluate(expression: str) -> str:
    """The value of an arithmetic expression, written as an answer; a ValueError says what is not allowed
    (anything but numbers, + - * /, unary signs and parentheses; more than MAX_LENGTH characters).

        >>> evaluate("24 + 5")
        '29'
        >>> evaluate("__import__('os')")
        Traceback (most recent call last):
        ValueError: expression: only numbers, + - * / and parentheses are allowed, not Call
    """
    if not isinstance(expression, str):
        raise TypeError(f"expression must be text such as '24 + 5', got {type(expression).__name__}.")
    if not expression.strip() or len(expression) > MAX_LENGTH:
        raise ValueError(f"expression must be 1 to {MAX_LENGTH} characters, got {len(expression.strip())}.")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"expression: {expression!r} is not arithmetic.") from None
    try:
        return written(value_of(tree))
    except ValueError as error:
        raise ValueError(f"expression: {error}") from None


def call_message(call_id: str, expression: str) -> dict:
    """An assistant message that calls the calculator, as OpenAI's chat messages write it."""
    function = {"name": "calculator", "arguments": json.dumps({"expression": expression})}
    call = {"id": call_id, "type": "function", "function": function}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def worked_call(call_id: str, expression: str) -> list[dict]:
    """A call and the tool's reply: the two messages one calculator turn adds to a chat."""
    result = {"role": "tool", "tool_call_id": call_id, "content": evaluate(expression)}
    return [call_message(call_id, expression), result]


def calculator_messages(question: str, shots: Sequence[tuple[str, str]] = SHOTS) -> list[dict]:
    """OpenAI chat messages that ask `question` after worked calculator turns, one per shot (the task's own
    worked sums by default; `shots=()` asks with none): the user asks, the assistant calls the calculator,
    the tool answers, the assistant repeats the answer.

        >>> [message["role"] for message in calculator_messages("What is 24 + 5?", shots=[("6 + 3", "9")])]
        ['user', 'assistant', 'tool', 'assistant', 'user']
    """
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"question must be non-empty text such as 'What is 24 + 5?', got {question!r}.")
    messages = []
    for index, (shot, answer) in enumerate(shots):
        messages += [
            {"role": "user", "content": f"What is {shot}?"},
            *worked_call(f"call_shot{index}", shot),
            {"role": "assistant", "content": answer},
        ]
    return messages + [{"role": "user", "content": question}]


def two_step_messages(
    question: str, shots: Sequence[tuple[str, Sequence[str]]] = TWO_STEP_SHOTS
) -> list[dict]:
    """OpenAI chat messages that ask `question` after worked two-step turns, one per shot (question, its
    two expressions): the assistant says the step and calls the calculator, the tool answers, the
    assistant calls again with that result, and then answers (STEP_WORDS, DONE_WORDS).

        >>> [m["role"] for m in two_step_messages("Add 41 and 25, then multiply the result by 4.", shots=[
        ...     ("Add 23 and 14, then multiply the result by 3.", ("23 + 14", "37 * 3"))])]
        ['user', 'assistant', 'tool', 'assistant', 'tool', 'assistant', 'user']
    """
    check_text("question", question, example="'Add 41 and 25, then multiply the result by 4.'")
    messages = []
    for index, (shot, expressions) in enumerate(shots):
        if len(expressions) != len(STEP_WORDS):
            raise ValueError(f"shots[{index}] must hold {len(STEP_WORDS)} expressions, got {expressions!r}.")
        messages.append({"role": "user", "content": shot})
        for step, (words, expression) in enumerate(zip(STEP_WORDS, expressions)):
            call, result = worked_call(f"call_shot{index}_{step}", expression)
            messages += [{**call, "content": words}, result]
        messages.append({"role": "assistant", "content": DONE_WORDS.format(evaluate(expressions[-1]))})
    return messages + [{"role": "user", "content": question}]


def calculator_prompt(
    tokenizer: PreTrainedTokenizerBase, question: str, shots: Sequence[tuple[str, str]] = SHOTS
) -> list[int]:
    """Token ids of `calculator_messages` with the calculator offered (Hermes' tools section in the system
    message); generate with `grammar=CALCULATOR.grammar()` so that the answer is one call."""
    return tool_chat_prompt(tokenizer, calculator_messages(question, shots), CALCULATOR)


def run_call(call: ToolCall) -> str:
    """What the calculator returns for one call: the value, or "error: ..." (as a tool would report it)."""
    check_record("call", call, "a ToolCall (from CALCULATOR.parse(text))", of=ToolCall)
    try:
        return evaluate(call.arguments["expression"])
    except ValueError as error:
        return f"error: {error}"


def calculator_answer(text: str) -> str | None:
    """The answer a calculator call gives: the call read out of `text` and evaluated; None when the text
    holds no valid call or the expression cannot be worked out.

        >>> calculator_answer('<tool_call>\\n{"name": "calculator", "arguments": {"expression": "2+5"}}\\n</tool_call>')
        '7'
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be the model's answer as a string, got {type(text).__name__}.")
    _, calls = CALCULATOR.parse(text)
    if len(calls) != 1:
        return None
    result = run_call(calls[0])
    return None if result.startswith("error") else result
