"""Tool calling through labkit's server, driven by the official, unmodified `openai` and `ollama` clients:
every call that tool_choice "required" or a named function asks for fits its tool's parameters (checked
with jsonschema), greedy and seeded, n choices each read on its own, whole or streamed (reassembled by
hand and by openai's stream helper); "auto" answers text or a valid call; finish_reason "tool_calls";
a call -> tool result -> answer conversation renders as labkit.decoding.tool_prompt renders it, in
OpenAI's shape and in Ollama's (arguments as objects, results named by tool_name); bad tool requests get
400 naming the field; and afterwards no request runs and every KV block is free.

One real server process (SmolLM2-135M-Instruct, labkit's Llama) on 127.0.0.1 serves the module. Ollama has
no tool_choice ("auto"), where SmolLM2 answers a plain question in words: its call is asked for with two
earlier calls in the conversation, which put "<" 5.4 logits ahead of any other first token and "tool"
5.5 ahead after it (greedy SmolLM2 then writes a get_weather call)."""

import json
import time

import httpx
import jsonschema
import ollama
import openai
import pytest

from labkit.decoding.tool_prompt import tool_chat_prompt
from labkit.decoding.tools import ToolSpec, call_text
from labkit.serving.http.engine_thread import TokenEvent
from labkit.serving.http.openai_choices import ChoiceWriter
from labkit.serving.http.tool_calls import openai_messages

slow = pytest.mark.slow  # every test that talks to the server (a real model in another process)

MODEL = "smollm2-135m"
WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
ADD_PARAMETERS = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "minimum": -1000, "maximum": 1000},
        "b": {"type": "integer", "minimum": -1000, "maximum": 1000},
    },
    "required": ["a", "b"],
    "additionalProperties": False,
}
PARAMETERS = {"get_weather": WEATHER_PARAMETERS, "add": ADD_PARAMETERS}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": WEATHER_PARAMETERS,
        },
    },
    {
        "type": "function",
        "function": {"name": "add", "description": "Add two integers.", "parameters": ADD_PARAMETERS},
    },
]
# TOOLS as the ollama client (0.6.3) sends them: it keeps each property's type, items, description and enum
# only (maxLength, minimum, additionalProperties never reach the server)
SENT_BY_OLLAMA = [ollama.Tool.model_validate(tool).model_dump(exclude_none=True) for tool in TOOLS]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
ONE_CALL = {
    "model": MODEL,
    "messages": QUESTION,
    "tools": TOOLS,
    "parallel_tool_calls": False,
    "max_tokens": 60,
}
RESULT = '{"temperature": 21}'


def shot(question: str, name: str, arguments: dict) -> list[dict]:
    """A question and the assistant's call, in Ollama's shape (no id, arguments as an object)."""
    return [
        {"role": "user", "content": question},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": name, "arguments": arguments}}],
        },
    ]


FEW_SHOT = [
    *shot("What is the weather in Oslo?", "get_weather", {"city": "Oslo", "unit": "celsius"}),
    *shot("What is 2 plus 3?", "add", {"a": 2, "b": 3}),
    *QUESTION,
]
SERVER_OPTIONS = {"max_num_seqs": 4}  # the module's server (conftest.py)


def assert_fits(name: str, arguments: dict, tools: list[dict] = TOOLS) -> None:
    """The call names one of the tools and its arguments validate against that tool's parameters."""
    parameters = {tool["function"]["name"]: tool["function"]["parameters"] for tool in tools}
    assert name in parameters
    jsonschema.validate(arguments, parameters[name])


def assert_one_valid_call(choice, name: str | None = None) -> None:
    """An OpenAI choice that is exactly one call (to `name`, if given), fitting its tool, and nothing else."""
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and name in (None, call.function.name)
    assert_fits(call.function.name, json.loads(call.function.arguments))


def calls_by_hand(chunks) -> tuple[list[dict], str | None, int]:
    """The calls of a streamed one-choice answer, put back together as OpenAI's clients do, its finish and
    the number of log-probability entries it carried; each call's first delta must carry its index, id,
    type and name."""
    calls, finish, entries = [], None, 0
    for chunk in chunks:
        if not chunk.choices:  # the usage chunk
            continue
        delta, finish = chunk.choices[0].delta, chunk.choices[0].finish_reason or finish
        entries += len(chunk.choices[0].logprobs.content) if chunk.choices[0].logprobs else 0
        assert not (delta.content or "").strip()  # a call answer has no text
        for piece in delta.tool_calls or []:
            if piece.index == len(calls):
                assert piece.id and piece.type == "function" and piece.function.name
                calls.append({"id": piece.id, "name": piece.function.name, "arguments": ""})
            calls[piece.index]["arguments"] += piece.function.arguments or ""
    return calls, finish, entries


def token_events(text: str, pieces: int = 7) -> list[TokenEvent]:
    """`text` as a stream of token events, cut into pieces of `pieces` characters."""
    return [TokenEvent(text[start : start + pieces], 1) for start in range(0, len(text), pieces)]


def test_a_streamed_answer_is_held_only_while_it_may_become_calls():
    writer = ChoiceWriter(chat=True, speller=None, logprobs=False, tools=ToolSpec.from_openai(TOOLS))
    assert writer.holds(token_events("<tool", 2)) and writer.holds(token_events("<tool_call>\n{", 3))
    assert not writer.holds(token_events("<b>", 2)) and not writer.holds(token_events("Paris", 2))
    assert not ChoiceWriter(True, None, False).holds(token_events("<tool", 2))  # no tools: text only
    held = token_events(call_text("add", {"a": 1, "b": 2}))
    *deltas, finish = writer.last(0, held, offset=0, finish="eos")
    [piece] = deltas[0]["delta"]["tool_calls"]
    assert (piece["index"], piece["type"], piece["function"]) == (
        0,
        "function",
        {"name": "add", "arguments": '{"a": 1, "b": 2}'},
    )
    assert len(deltas) == 1 and finish == {
        "index": 0,
        "delta": {},
        "finish_reason": "tool_calls",
        "logprobs": None,
    }
    [text] = writer.last(0, token_events("<b>"), offset=0, finish="eos")
    assert (text["delta"], text["finish_reason"]) == ({"content": "<b>"}, "stop")


def test_ollama_results_answer_the_calls_of_their_tool_name():
    calls = [
        {"function": {"name": "add", "arguments": {"a": 1, "b": 2}}},
        {"id": "mine", "function": {"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}},
    ]
    converted = openai_messages(
        [
            {"role": "user", "content": "?"},
            {"role": "assistant", "tool_calls": calls},
            {"role": "tool", "content": "3", "tool_name": "get_weather"},
            {"role": "tool", "content": "1"},
        ]
    )
    assert [call["id"] for call in converted[1]["tool_calls"]] == ["call_1_0", "mine"]
    assert [message.get("tool_call_id") for message in converted[2:]] == ["mine", "call_1_0"]


@slow
@pytest.mark.parametrize("choice", ["required", NAMED], ids=["required", "named"])
def test_required_and_named_calls_fit_their_tools_streamed_or_not(client, choice):
    name = None if choice == "required" else "get_weather"
    greedy = client.chat.completions.create(**ONE_CALL, tool_choice=choice, temperature=0).choices[0]
    assert_one_valid_call(greedy, name)
    chunks = list(
        client.chat.completions.create(
            **ONE_CALL,
            tool_choice=choice,
            temperature=0,
            stream=True,
            logprobs=True,
            stream_options={"include_usage": True},
        )
    )
    [call], finish, entries = calls_by_hand(chunks)
    assert finish == "tool_calls" and call["id"] != greedy.message.tool_calls[0].id  # a fresh id each answer
    assert entries == chunks[-1].usage.completion_tokens  # every held token's log-probability, once
    assert (call["name"], json.loads(call["arguments"])) == (
        greedy.message.tool_calls[0].function.name,
        json.loads(greedy.message.tool_calls[0].function.arguments),
    )
    with client.chat.completions.stream(
        **ONE_CALL, tool_choice=choice, temperature=1.0, seed=5, n=2
    ) as stream:
        sampled = stream.get_final_completion()
    assert [c.index for c in sampled.choices] == [0, 1]
    for each in sampled.choices:  # each choice is read on its own
        assert_one_valid_call(each, name)


@slow
def test_auto_answers_text_or_a_valid_call(client):
    answer = client.chat.completions.create(
        model=MODEL, messages=QUESTION, tools=TOOLS, max_tokens=8, temperature=0
    ).choices[0]
    if answer.message.tool_calls:
        assert_one_valid_call(answer)
    else:
        assert answer.finish_reason in ("stop", "length") and answer.message.content
        assert "<tool_call>" not in answer.message.content
    streamed = list(
        client.chat.completions.create(
            model=MODEL, messages=QUESTION, tools=TOOLS, max_tokens=8, temperature=0, stream=True
        )
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed)
    assert (
        text == (answer.message.content or "")
        and streamed[-1].choices[0].finish_reason == answer.finish_reason
    )


@slow
def test_a_call_its_result_and_the_answer_render_as_tool_prompt_does(client, tokenizer):
    first = client.chat.completions.create(**ONE_CALL, tool_choice="required", temperature=0).choices[0]
    call = first.message.tool_calls[0]
    conversation = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": RESULT},
    ]
    answer = client.chat.completions.create(
        model=MODEL, messages=conversation, tools=TOOLS, max_tokens=8, temperature=0
    )
    expected = tool_chat_prompt(tokenizer, conversation, ToolSpec.from_openai(TOOLS))
    assert answer.usage.prompt_tokens == len(expected)
    if answer.choices[0].message.tool_calls:
        assert_one_valid_call(answer.choices[0])
    else:
        assert answer.choices[0].message.content and answer.choices[0].finish_reason in ("stop", "length")


@slow
def test_ollama_calls_carry_object_arguments_streamed_or_not(ollama_client):
    greedy = {"temperature": 0, "num_predict": 60}
    answer = ollama_client.chat(model=MODEL, messages=FEW_SHOT, tools=TOOLS, stream=False, options=greedy)
    [call] = answer.message.tool_calls
    assert isinstance(call.function.arguments, dict) and answer.message.content == ""
    assert_fits(call.function.name, call.function.arguments, SENT_BY_OLLAMA)
    assert answer.done_reason == "stop"  # Ollama has no "tool_calls" reason
    parts = list(ollama_client.chat(model=MODEL, messages=FEW_SHOT, tools=TOOLS, stream=True, options=greedy))
    streamed = [c for part in parts for c in part.message.tool_calls or []]
    assert [(c.function.name, c.function.arguments) for c in streamed] == [
        (call.function.name, call.function.arguments)
    ]
    assert "".join(part.message.content for part in parts) == "" and parts[-1].done


@slow
def test_ollama_tool_results_render_as_openais(client, ollama_client):
    """A result named by tool_name answers the Ollama call before it: the same prompt as OpenAI's turns."""
    arguments = {"city": "Paris", "unit": "celsius"}
    ollama_turns = [
        *shot(QUESTION[0]["content"], "get_weather", arguments),
        {"role": "tool", "content": RESULT, "tool_name": "get_weather"},
    ]
    openai_turns = [
        *QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps(arguments)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": RESULT},
    ]
    answer = ollama_client.chat(
        model=MODEL,
        messages=ollama_turns,
        tools=TOOLS,
        stream=False,
        options={"temperature": 0, "num_predict": 4},
    )
    reference = client.chat.completions.create(
        model=MODEL, messages=openai_turns, tools=SENT_BY_OLLAMA, max_tokens=1
    )
    assert answer.prompt_eval_count == reference.usage.prompt_tokens
    assert answer.message.content or answer.message.tool_calls


def function(name: str | None = None, **fields) -> dict:
    return {"type": "function", "function": {**({"name": name} if name else {}), **fields}}


@slow
@pytest.mark.parametrize(
    "fields, param",
    [
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "fly"}}}, "tool_choice"),
        ({"tools": [function(description="no name")]}, "tools"),
        (
            {
                "tools": [
                    function("f", parameters={"type": "object", "properties": {"x": {"type": "colour"}}})
                ]
            },
            "tools",
        ),
        ({"tools": [function("f", parameters={"type": "array"})]}, "tools"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [], "tool_choice": NAMED}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": 5}, "tool_choice"),
        ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "response_format"),
        (
            {"messages": [*QUESTION, {"role": "tool", "tool_call_id": "call_x", "content": RESULT}]},
            "messages",
        ),
    ],
)
def test_bad_tool_requests_get_400_naming_the_field(client, fields, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**{"model": MODEL, "messages": QUESTION, "max_tokens": 2, **fields})
    assert caught.value.body["param"] == param and f"'{param}" in caught.value.message


@slow
def test_tools_on_completions_and_bad_ollama_tools_are_refused(client, ollama_client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, extra_body={"tools": TOOLS})
    assert caught.value.body["param"] == "tools" and "/v1/chat/completions" in caught.value.message
    for fields, words in (
        ({"tools": [function(description="no name")]}, "'tools[0].function.name'"),
        ({"tools": TOOLS, "format": "json"}, "'format'"),
    ):
        with pytest.raises(ollama.ResponseError) as refused:
            ollama_client.chat(model=MODEL, messages=QUESTION, options={"num_predict": 2}, **fields)
        assert refused.value.status_code == 400 and words in refused.value.error


@slow
def test_afterwards_nothing_runs_and_every_kv_block_is_free(server, client):
    assert (
        client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=2)
        .choices[0]
        .message.content
    )
    deadline = time.monotonic() + 30
    while not {"labkit_requests_running 0.0", "labkit_kv_blocks_used 0.0"} <= set(
        httpx.get(server.url + "/metrics", timeout=10).text.splitlines()
    ):
        assert time.monotonic() < deadline, "requests still running or KV blocks still held after 30 s"
        time.sleep(0.1)
