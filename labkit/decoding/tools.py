"""Tool calling (OpenAI's `tools`, `tool_choice` and `parallel_tool_calls`): the tools a request offers,
a grammar that makes every call the model writes parse and fit its tool's parameters, and the calls
read back out of the answer.

    >>> spec = ToolSpec.from_openai(tools=[WEATHER, ADD], tool_choice="required")
    >>> ids = tool_chat_prompt(tokenizer, [{"role": "user", "content": "Weather in Paris?"}], spec)
    >>> text = labkit.generate_text(model, tokenizer, ids, grammar=spec.grammar(), max_new_tokens=60)
    >>> spec.parse(text)
    (None, [ToolCall(id='call_5c1f...', name='get_weather', arguments={'city': 'Paris', 'unit': 'celsius'}, ...)])

A call is written Hermes' way, the format Qwen2.5 and most open chat models were trained on (how the
prompt teaches it, and how tool results come back, is labkit.decoding.tool_prompt's part):

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

The grammar is a DecodingConfig option like json_schema (`grammar=`, a Lark grammar for llguidance), so
labkit.generate and the serving Engine both follow it. tool_choice picks it:

    "none"       no grammar, no tools in the prompt: plain text
    "auto"       start: TEXT | calls   text that never writes "<tool_call>", or calls and nothing else
    "required"   start: calls          one or more calls (exactly one with parallel_tool_calls=False)
    {"type": "function", "function": {"name": "f"}}    the same, with f the only tool

Every call's JSON is one rule, `%json {"anyOf": [{"name": const, "arguments": parameters}, ...]}`, with
json.dumps' spacing (as for json_schema: a model cannot pad between tokens forever). The grammar bounds
the syntax, not the length: a free-text argument can run to max_new_tokens (finish "length", then the
unfinished call is not read back, the text is returned as content). The mask costs about 1.4 ms a token
for two tools, "auto"'s no-"<tool_call>" text rule included (measured on a busy 2-core machine), beside
~22 ms for a SmolLM2-135M decode step.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import jsonschema

from labkit.core.arguments import InvalidArgument
from labkit.decoding import structured

TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # OpenAI's rule for a function's name
CHOICES = ("none", "auto", "required")
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
CALL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
NO_CALL_TEXT = r"/(?s:.+)/ & ~/(?s:.*)<tool_call>(?s:.*)/"  # any non-empty text without "<tool_call>"


@dataclass(frozen=True)
class Tool:
    """A function the model may call: its name, what it does, and a JSON schema of its arguments (an object)."""

    name: str
    description: str = ""
    parameters: dict | None = None  # None: no arguments ({"type": "object", "properties": {}})

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", check_parameters(self.parameters, "parameters"))

    @classmethod
    def from_openai(cls, tool: object, where: str = "tool") -> Tool:
        """A Tool from {"type": "function", "function": {"name", "description", "parameters"}}; a ValueError
        names the field (`where` is how the caller calls this tool, e.g. "tools[2]").

            >>> Tool.from_openai({"type": "function", "function": {"name": "now"}}).parameters
            {'type': 'object', 'properties': {}}
        """
        if not isinstance(tool, dict) or tool.get("type") != "function":
            got = tool.get("type") if isinstance(tool, dict) else tool
            raise InvalidArgument(
                f'{where}.type must be "function" (labkit calls functions only), got {got!r}.',
                f"{where}.type",
            )
        function = tool.get("function")
        if not isinstance(function, dict):
            raise InvalidArgument(
                f'{where}.function must be an object {{"name", "description", "parameters"}}, '
                f"got {function!r}.",
                f"{where}.function",
            )
        name = function.get("name")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise InvalidArgument(
                f"{where}.function.name must be 1 to 64 letters, digits, '_' or '-', got {name!r}.",
                f"{where}.function.name",
            )
        description = function.get("description", "")
        if not isinstance(description, str):
            raise InvalidArgument(
                f"{where}.function.description must be text, got {description!r}.",
                f"{where}.function.description",
            )
        parameters = check_parameters(function.get("parameters"), f"{where}.function.parameters")
        return cls(name, description, parameters)

    def to_openai(self) -> dict:
        """The tool as OpenAI's API writes it (and as the prompt shows it)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def check_parameters(parameters: object, where: str) -> dict:
    """A copy of a tool's parameters schema, checked by llguidance and jsonschema; it must describe an
    object (arguments are named), and a schema without a "type" gets "type": "object"."""
    if parameters is None:
        return {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise InvalidArgument(
            f"{where} must be a JSON schema of the arguments (an object), got {parameters!r}.", f"{where}"
        )
    if parameters.get("type", "object") != "object":
        raise InvalidArgument(
            f'{where} must describe an object ("type": "object": arguments are named), '
            f"got type {parameters['type']!r}.",
            f"{where}",
        )
    checked = structured.check_json_schema({"type": "object", **parameters}, where)
    try:
        jsonschema.validators.validator_for(checked).check_schema(checked)
    except jsonschema.SchemaError as error:
        raise InvalidArgument(f"{where} is not a valid JSON schema: {error.message}.", f"{where}") from None
    return checked


def check_tools(tools: object) -> tuple[Tool, ...]:
    """OpenAI's `tools` as Tools: None or [] is none; names must differ. A ValueError names the field."""
    if tools is None:
        return ()
    if isinstance(tools, (str, dict)) or not isinstance(tools, Iterable):
        raise InvalidArgument(
            f'tools must be a list of {{"type": "function", "function": {{...}}}} objects, got {tools!r}.',
            "tools",
        )
    checked = tuple(
        tool if isinstance(tool, Tool) else Tool.from_openai(tool, f"tools[{index}]")
        for index, tool in enumerate(tools)
    )
    names = [tool.name for tool in checked]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidArgument(
            f"tools must have different names; {', '.join(repeated)} is given more than once.", "tools"
        )
    return checked


@dataclass(frozen=True)
class ToolChoice:
    """What the model may do with the tools: "none", "auto", "required", or "function" (call `name`)."""

    mode: str = "auto"
    name: str | None = None  # the function to call, when mode is "function"


def check_tool_choice(choice: object, tools: Sequence[Tool]) -> ToolChoice:
    """OpenAI's `tool_choice` against the tools offered; None is OpenAI's default ("auto" with tools,
    "none" without). A ValueError names tool_choice.

        >>> check_tool_choice({"type": "function", "function": {"name": "add"}}, tools)
        ToolChoice(mode='function', name='add')
    """
    if choice is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(choice, str) and choice in CHOICES:
        if choice == "required" and not tools:
            raise InvalidArgument(
                'tool_choice "required" needs tools to call, and tools is empty.', "tool_choice"
            )
        return ToolChoice(choice)
    function = (
        choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    )
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise InvalidArgument(
            f'tool_choice must be "none", "auto", "required" or {{"type": "function", "function": '
            f'{{"name": ...}}}}, got {choice!r}.',
            "tool_choice",
        )
    offered = [tool.name for tool in tools]
    if name not in offered:
        raise InvalidArgument(
            f"tool_choice names the function {name!r}, which is not among tools "
            f"({', '.join(offered) or 'none given'}).",
            "tool_choice",
        )
    return ToolChoice("function", name)


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: arguments as a dict and as the JSON text it wrote (OpenAI sends the text)."""

    id: str  # "call_" and 24 hex digits, as OpenAI's ids look
    name: str
    arguments: dict
    arguments_json: str

    def to_openai(self) -> dict:
        """The call as an OpenAI message's `tool_calls` item."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments_json},
        }


def new_call_id() -> str:
    """A fresh id for a tool call: "call_" and 24 random hex digits."""
    return "call_" + uuid.uuid4().hex[:24]


def call_schema(tools: Sequence[Tool]) -> dict:
    """The JSON schema of one call to any of `tools`: {"name": its name, "arguments": its parameters}."""
    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": tool.name}, "arguments": tool.parameters},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    return {"anyOf": calls, "x-guidance": structured.COMPILE_OPTIONS}


def tool_call_grammar(tools: Sequence[Tool], choice: ToolChoice, parallel: bool = True) -> str | None:
    """The Lark grammar (DecodingConfig's `grammar`) for a tool choice; None for "none" or no tools.

    >>> print(tool_call_grammar(tools, ToolChoice("required"), parallel=False))
    start: call
    call: "<tool_call>\\n" %json {"anyOf": [...]} "\\n</tool_call>"
    """
    if choice.mode == "none" or not tools:
        return None
    callable_tools = [tool for tool in tools if choice.mode != "function" or tool.name == choice.name]
    calls = "calls" if parallel else "call"
    start = f"start: TEXT | {calls}" if choice.mode == "auto" else f"start: {calls}"
    rules = [
        start,
        'calls: call ("\\n" call)*',
        f'call: "{CALL_OPEN}\\n" %json {json.dumps(call_schema(callable_tools))} "\\n{CALL_CLOSE}"',
    ]
    if choice.mode == "auto":
        rules.append(f"TEXT: {NO_CALL_TEXT}")
    return "\n".join(rules if parallel else [rules[0]] + rules[2:])


def call_text(name: str, arguments: dict) -> str:
    """One call as the model writes it (and as an earlier call is shown to it in the prompt)."""
    body = json.dumps(
        {"name": name, "arguments": arguments},
        ensure_ascii=False,
        separators=(
            structured.COMPILE_OPTIONS["item_separator"],
            structured.COMPILE_OPTIONS["key_separator"],
        ),
    )
    return f"{CALL_OPEN}\n{body}\n{CALL_CLOSE}"


def read_call(block: str, tools: dict[str, Tool]) -> ToolCall | None:
    """The call a <tool_call> block holds, or None unless it is JSON naming a tool, with arguments that
    fit the tool's parameters."""
    try:
        call = json.loads(block)
    except json.JSONDecodeError:
        return None
    if (
        not isinstance(call, dict)
        or call.get("name") not in tools
        or not isinstance(call.get("arguments"), dict)
    ):
        return None
    tool = tools[call["name"]]
    if not jsonschema.validators.validator_for(tool.parameters)(tool.parameters).is_valid(call["arguments"]):
        return None
    arguments_json = json.dumps(call["arguments"], ensure_ascii=False)
    return ToolCall(new_call_id(), tool.name, call["arguments"], arguments_json)


def parse_tool_calls(text: str, tools: Iterable[Tool]) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) of an answer: the text outside <tool_call> blocks (None if there is none) and the
    calls inside them. If any block is not a valid call to one of `tools`, none is read: the whole text
    is the content, and no call is returned that a tool could not take.

        >>> parse_tool_calls('<tool_call>\\n{"name": "add", "arguments": {"a": 1, "b": 2}}\\n</tool_call>', tools)
        (None, [ToolCall(id='call_...', name='add', arguments={'a': 1, 'b': 2}, arguments_json='{"a": 1, "b": 2}')])
    """
    by_name = {tool.name: tool for tool in tools}
    blocks = CALL_BLOCK.findall(text)
    calls = [read_call(block, by_name) for block in blocks]
    if not blocks or None in calls:
        return text, []
    content = CALL_BLOCK.sub("", text).strip()
    return content or None, calls


def tool_finish_reason(finish_reason: str | None, calls: Sequence[ToolCall]) -> str | None:
    """OpenAI's finish_reason once the calls are read: "tool_calls" when there are any."""
    return "tool_calls" if calls else finish_reason


@dataclass(frozen=True)
class ToolSpec:
    """A request's tools, tool choice and parallel_tool_calls, checked together: what a server needs from
    the request body to render the prompt, constrain the answer and read the calls back.

        >>> spec = ToolSpec.from_openai([WEATHER], "auto", parallel_tool_calls=False)
        >>> config = DecodingConfig(grammar=spec.grammar(), max_new_tokens=80)
    """

    tools: tuple[Tool, ...] = ()
    choice: ToolChoice = ToolChoice("none")
    parallel: bool = True  # parallel_tool_calls: True allows one or more calls, False exactly one

    @classmethod
    def from_openai(
        cls, tools: object = None, tool_choice: object = None, parallel_tool_calls: object = True
    ) -> ToolSpec:
        """Check OpenAI's three fields; a ValueError names the one at fault."""
        checked = check_tools(tools)
        if not isinstance(parallel_tool_calls, bool):
            raise InvalidArgument(
                f"parallel_tool_calls must be true or false, got {parallel_tool_calls!r}.",
                "parallel_tool_calls",
            )
        return cls(checked, check_tool_choice(tool_choice, checked), parallel_tool_calls)

    @property
    def offered(self) -> tuple[Tool, ...]:
        """The tools the prompt lists: all of them, or none when tool_choice is "none"."""
        return () if self.choice.mode == "none" else self.tools

    def grammar(self) -> str | None:
        """DecodingConfig's `grammar` for these tools (None: plain text)."""
        return tool_call_grammar(self.tools, self.choice, self.parallel)

    def parse(self, text: str) -> tuple[str | None, list[ToolCall]]:
        """(content, calls) of an answer; with tool_choice "none" the whole text is content."""
        return (text, []) if not self.offered else parse_tool_calls(text, self.tools)
