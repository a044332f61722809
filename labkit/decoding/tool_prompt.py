"""Tools and tool turns in the prompt: the tools a request offers, the assistant's earlier calls
(`tool_calls`) and the results that came back (`role: "tool"` messages), rendered into the prompt's ids.

SmolLM2-135M-Instruct's chat template has no tools section: it prints each message's role and content
and nothing else. So labkit writes the tools into the system message, Hermes' way (Qwen2.5's template
does the same), and renders the tool turns as text the template can print:

    <|im_start|>system
    (the request's system message, if any, then)
    # Tools
    You can call functions to answer. Their signatures, one JSON object a line, are inside <tools></tools>:
    <tools>
    {"type": "function", "function": {"name": "get_weather", "description": ..., "parameters": {...}}}
    </tools>
    To call one, answer with a <tool_call></tool_call> block for each call, ...<|im_end|>
    <|im_start|>user
    Weather in Paris?<|im_end|>
    <|im_start|>assistant
    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call><|im_end|>
    <|im_start|>user
    <tool_response>
    {"temperature": 21}
    </tool_response><|im_end|>
    <|im_start|>assistant

An assistant message's calls follow its content, one block each, as labkit.decoding.tools' grammar makes
the model write them; the results of consecutive tool messages share one user turn, in order, each in a
<tool_response> block. A tool message must answer an earlier call (its tool_call_id).

A tokenizer whose chat template reads `tools` (Qwen2.5's, Llama 3.1's, ...) is given the tools and the
messages in transformers' shape instead: `apply_chat_template(messages, tools=...)`. The grammar still
expects Hermes' <tool_call> blocks, which Qwen2.5's template asks for; other formats need their own grammar.

    >>> ids = tool_chat_prompt(tokenizer, messages, ToolSpec.from_openai(tools=[WEATHER]))
"""

from __future__ import annotations

import json

from transformers import PreTrainedTokenizerBase

from labkit.core.text import chat_prompt
from labkit.decoding.tools import ToolSpec, call_text

ROLES = ("system", "user", "assistant", "tool")
TOOLS_INTRO = (
    "# Tools\n\nYou can call functions to answer. Their signatures, one JSON object a line, are inside "
    "<tools></tools>:\n<tools>\n"
)
TOOLS_OUTRO = (
    "\n</tools>\n\nTo call one, answer with a <tool_call></tool_call> block for each call, holding a "
    "JSON object with the function's name and its arguments:\n<tool_call>\n"
    '{"name": <function name>, "arguments": <the arguments as a JSON object>}\n</tool_call>'
)


def tool_chat_prompt(
    tokenizer: PreTrainedTokenizerBase, messages: str | list[dict], tools: ToolSpec | object = None
) -> list[int]:
    """Token ids of a chat with tools, ready for the answer. messages are OpenAI's: system, user,
    assistant (content and/or tool_calls) and tool (tool_call_id, content) messages; tools is a
    ToolSpec or OpenAI's `tools` list (tool_choice "none" lists no tools).

        >>> tokenizer.decode(tool_chat_prompt(tokenizer, "Weather in Paris?", [WEATHER]))
        '<|im_start|>system\\n# Tools\\n...<|im_start|>user\\nWeather in Paris?<|im_end|>\\n<|im_start|>assistant\\n'
    """
    spec = tools if isinstance(tools, ToolSpec) else ToolSpec.from_openai(tools)
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    calls = check_tool_messages(messages)
    if "tools" in (getattr(tokenizer, "chat_template", None) or ""):
        return template_prompt(tokenizer, messages, spec, calls)
    return chat_prompt(tokenizer, hermes_messages(messages, spec))


def check_tool_messages(messages: object) -> dict[str, str]:
    """Check OpenAI's chat messages, tool turns included; return {call id: function name} of the
    assistant's calls. A ValueError names the message and field at fault (messages[3].tool_call_id)."""
    if not isinstance(messages, list) or not messages:
        raise ValueError(
            f"messages must be a non-empty list of {{'role', 'content'}} dicts, got {messages!r}."
        )
    calls: dict[str, str] = {}
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            got = message.get("role") if isinstance(message, dict) else message
            raise ValueError(f"{where}.role must be one of {', '.join(ROLES)}, got {got!r}.")
        has_calls = message["role"] == "assistant" and message.get("tool_calls")
        content = message.get("content")
        if not isinstance(content, str) and not (has_calls and content is None):
            raise ValueError(f"{where}.content must be text (null only beside tool_calls), got {content!r}.")
        if has_calls:
            calls.update(check_calls(message["tool_calls"], f"{where}.tool_calls"))
        if message["role"] == "tool" and message.get("tool_call_id") not in calls:
            raise ValueError(
                f"{where}.tool_call_id must be the id of an earlier assistant tool call "
                f"({', '.join(calls) or 'none made'}), got {message.get('tool_call_id')!r}."
            )
    return calls


def check_calls(tool_calls: object, where: str) -> dict[str, str]:
    """{id: name} of an assistant message's tool_calls; each is {"id", "type": "function", "function":
    {"name", "arguments"}}, with arguments a JSON object given as text (OpenAI's way) or as a dict."""
    if not isinstance(tool_calls, list):
        raise ValueError(f"{where} must be a list of calls, got {tool_calls!r}.")
    calls = {}
    for index, call in enumerate(tool_calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(call.get("id"), str):
            raise ValueError(
                f'{where}[{index}] must be {{"id", "type": "function", "function": {{"name", '
                f'"arguments"}}}}, got {call!r}.'
            )
        if not isinstance(function.get("name"), str):
            raise ValueError(f"{where}[{index}].function.name must be text, got {function.get('name')!r}.")
        if not isinstance(arguments_of(function), dict):
            raise ValueError(
                f"{where}[{index}].function.arguments must be a JSON object (as text or a dict), "
                f"got {function.get('arguments')!r}."
            )
        calls[call["id"]] = function["name"]
    return calls


def arguments_of(function: dict) -> object:
    """A call's arguments as data: OpenAI sends them as JSON text; None if that text is not JSON."""
    arguments = function.get("arguments", {})
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return None


def tools_section(spec: ToolSpec) -> str:
    """The system message's part that lists the tools and shows how to call them ('' with none)."""
    if not spec.offered:
        return ""
    listed = "\n".join(json.dumps(tool.to_openai(), ensure_ascii=False) for tool in spec.offered)
    return TOOLS_INTRO + listed + TOOLS_OUTRO


def hermes_turn(message: dict) -> dict[str, str]:
    """One message as {role, content} any template prints: calls after the content as <tool_call> blocks,
    a tool's result as a user turn holding a <tool_response> block."""
    role, content = message["role"], message.get("content") or ""
    if role == "assistant" and message.get("tool_calls"):
        blocks = [
            call_text(call["function"]["name"], arguments_of(call["function"]))
            for call in message["tool_calls"]
        ]
        content = "\n".join(([content] if content else []) + blocks)
    if role == "tool":
        return {"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"}
    return {"role": role, "content": content}


def hermes_messages(messages: list[dict], spec: ToolSpec) -> list[dict[str, str]]:
    """The chat as {role, content} messages: the tools in the system message, the results of
    consecutive tool messages in one user turn."""
    rendered: list[dict[str, str]] = []
    for index, message in enumerate(messages):
        turn = hermes_turn(message)
        if message["role"] == "tool" and index > 0 and messages[index - 1]["role"] == "tool":
            rendered[-1]["content"] += "\n" + turn["content"]
        else:
            rendered.append(turn)
    section = tools_section(spec)
    if section and rendered[0]["role"] == "system":
        rendered[0]["content"] += "\n\n" + section
    elif section:
        rendered.insert(0, {"role": "system", "content": section})
    return rendered


def template_prompt(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict], spec: ToolSpec, calls: dict[str, str]
) -> list[int]:
    """Token ids from a chat template that reads `tools`: calls' arguments as dicts (transformers' shape),
    tool messages with their function's name."""
    shaped = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {
                    **call,
                    "function": {
                        "name": call["function"]["name"],
                        "arguments": arguments_of(call["function"]),
                    },
                }
                for call in message["tool_calls"]
            ]
        if message["role"] == "tool":
            message["name"] = calls[message["tool_call_id"]]
        shaped.append(message)
    tools = [tool.to_openai() for tool in spec.offered] or None
    rendered = tokenizer.apply_chat_template(shaped, tools=tools, add_generation_prompt=True, tokenize=False)
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]
