"""Tool calling over HTTP: what OpenAI's chat route and Ollama's /api/chat add to labkit.decoding.tools
(the tools checked, the Hermes prompt, a grammar that makes every call parse, the calls read back).

A request's `tools` (and OpenAI's `tool_choice` and `parallel_tool_calls`; Ollama has no tool_choice, so
it is "auto") become a ToolSpec, or a 400 naming the field at fault: 'tools[1].function.name', or
'tool_choice' for a function that is not among the tools, or "required" with none to call. The spec's
grammar joins the request's DecodingConfig; another constraint on the same answer (response_format,
Ollama's format, a thinking budget) is refused, naming it.

Every answer is read back whole: with tools offered, the grammar lets the model write either text that
never holds "<tool_call>" or calls and nothing else. So a streamed answer is held back while it may still
become calls (its text so far is a beginning of "<tool_call>", or starts with it) and sent as it comes
once it is plain text. A held answer is read at its end: calls, or (cut by max_tokens) its text. vLLM's
tool parsers stream the arguments as they come instead; holding a call back delays its first byte to its
end (a get_weather call is about 35 tokens), and is what makes every call that reaches a client whole.

Ollama's calls come without ids (the `ollama` client drops them): `openai_messages` gives each one an id
and each tool result the id of the call it answers (its own tool_call_id, else the first unanswered call
to its tool_name, else the first unanswered call), so labkit.decoding.tool_prompt reads both protocols. Note
that the `ollama` client (0.6.3) sends each parameter's type, items, description and enum only: a
maxLength, a minimum or "additionalProperties": false never reaches the server, so its grammar cannot
hold the model to them (OpenAI's client sends the schema as given).

    >>> spec = request_tools([WEATHER], tool_choice="required")
    >>> may_be_calls(spec, "<tool")              # held back: it may still become a call
    True
    >>> ollama_call(0, call)
    {'id': 'call_5c1f...', 'function': {'index': 0, 'name': 'get_weather', 'arguments': {'city': 'Paris'}}}
"""

from __future__ import annotations

from collections.abc import Sequence

from labkit.core.arguments import InvalidArgument
from labkit.decoding.tools import CALL_OPEN, ToolCall, ToolSpec, check_tool_choice, check_tools
from labkit.serving.http.errors import ClientError


def field_error(error: ValueError, param: str) -> ClientError:
    """The decoding layer's InvalidArgument (its `parameter` is the field at fault, such as
    "tools[0].function.name") as a 400 that quotes that field; `param` is the request's top field.

        >>> field_error(InvalidArgument("tools[0].type must be \"function\", got 'x'.", "tools[0].type"), "tools")
        ClientError(400, "'tools[0].type' must be \"function\", got 'x'.", param="tools")
    """
    if not isinstance(error, InvalidArgument):
        return ClientError(400, str(error), param)
    return ClientError(400, error.called(f"'{error.parameter or param}'"), param)


def request_tools(tools: object, tool_choice: object = None, parallel_tool_calls: bool = True) -> ToolSpec:
    """OpenAI's (or Ollama's) tool fields as a ToolSpec; a 400 names the field at fault.

    >>> request_tools([WEATHER], {"type": "function", "function": {"name": "add"}})
    ClientError: 'tool_choice' names the function 'add', which is not among tools (get_weather).
    """
    try:
        checked = check_tools(tools)
    except ValueError as error:
        raise field_error(error, "tools") from None
    try:
        choice = check_tool_choice(tool_choice, checked)
    except ValueError as error:
        raise field_error(error, "tool_choice") from None
    return ToolSpec(checked, choice, parallel_tool_calls)


def tool_grammar(spec: ToolSpec, constraints: dict[str, bool]) -> str | None:
    """The grammar of the tools' calls, for the request's DecodingConfig (None when no tool is offered).
    constraints: the request's other constraints on the answer, field -> given; a given one is refused (one
    grammar per answer).

        >>> tool_grammar(spec, {"response_format": True})
        ClientError: 'response_format' cannot be combined with tools: ...
    """
    grammar = spec.grammar()
    if grammar is None:
        return None
    for field, given in constraints.items():
        if given:
            raise ClientError(
                400,
                f"'{field}' cannot be combined with tools: with tools offered, the answer "
                "already follows their grammar (text, or calls that fit the tools' parameters). "
                "Send one of them.",
                field,
            )
    return grammar


def may_be_calls(spec: ToolSpec, text: str) -> bool:
    """Whether a streamed answer that reads `text` so far may still be calls (then it is held back): tools
    are offered and `text` is a beginning of "<tool_call>" or starts with it."""
    return bool(spec.offered) and (CALL_OPEN.startswith(text) or text.startswith(CALL_OPEN))


def streamed_call(position: int, call: ToolCall) -> dict:
    """One call as an item of OpenAI's streamed `delta.tool_calls`: its position among the answer's calls,
    id, type and name, and its arguments (JSON text) whole, in one piece."""
    return {"index": position, **call.to_openai()}


def ollama_call(position: int, call: ToolCall) -> dict:
    """One call as an item of Ollama's `message.tool_calls`: arguments as an object (api/types.go ToolCall)."""
    return {"id": call.id, "function": {"index": position, "name": call.name, "arguments": call.arguments}}


def openai_messages(messages: Sequence[dict]) -> list[dict]:
    """Ollama's chat messages as OpenAI's, for labkit.decoding.tool_prompt: each assistant call gets an id
    (its own, or "call_<message>_<call>"), each tool message the id of the call it answers (see the module
    doc); a tool message that answers no call keeps none, and tool_prompt refuses it naming the message.

        >>> openai_messages([{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f",
        ...     "arguments": {}}}]}, {"role": "tool", "content": "1", "tool_name": "f"}])[1]["tool_call_id"]
        'call_0_0'
    """
    unanswered: list[tuple[str, object]] = []  # (id, function name) of the calls no result answered yet
    converted = []
    for index, message in enumerate(messages):
        message = dict(message)
        if isinstance(message.get("tool_calls"), list):
            message["tool_calls"] = [
                with_id(call, f"call_{index}_{number}") for number, call in enumerate(message["tool_calls"])
            ]
            unanswered += [
                (call["id"], function_name(call)) for call in message["tool_calls"] if isinstance(call, dict)
            ]
        if message.get("role") == "tool":
            answered = answered_call(unanswered, message.get("tool_call_id"), message.get("tool_name"))
            if answered is not None:
                unanswered.remove(answered)
                message["tool_call_id"] = answered[0]
        converted.append(message)
    return converted


def with_id(call: object, fresh: str) -> object:
    """An Ollama call with OpenAI's id and type (its own id kept); anything but an object as it came."""
    if not isinstance(call, dict):
        return call
    given = call.get("id")
    return {**call, "id": given if isinstance(given, str) and given else fresh, "type": "function"}


def function_name(call: dict) -> object:
    function = call.get("function")
    return function.get("name") if isinstance(function, dict) else None


def answered_call(
    unanswered: list[tuple[str, object]], call_id: object, name: object
) -> tuple[str, object] | None:
    """The call a tool message answers: the one with its id, else the first to its tool, else the first."""
    for matches in (lambda call: call[0] == call_id, lambda call: call[1] == name, lambda call: True):
        found = next((call for call in unanswered if matches(call)), None)
        if found is not None:
            return found
    return None
