"""Tool calling: bad tools and tool choices are refused naming the field; the grammar for each tool choice
accepts exactly the answers it should (checked on strings, no model); calls are read back out of the text;
a conversation with calls and tool results renders into the prompt; and with the real SmolLM2, "required"
and a named function give calls that parse and fit their parameters, greedy or sampled, while "auto" gives
text or a valid call. The schemas are bounded (enums, maxLength, integer ranges), so one call always fits
in max_new_tokens and the grammar alone decides whether the answer ends with EOS."""

import copy
import json
import re

import jsonschema
import llguidance
import pytest

import labkit
from labkit.decoding.config import DecodingConfig
from labkit.decoding.structured import compiled_lark, grammar_vocabulary
from labkit.decoding.tool_prompt import tool_chat_prompt
from labkit.decoding.tools import (
    Tool,
    ToolChoice,
    ToolSpec,
    check_tool_choice,
    check_tools,
    parse_tool_calls,
    tool_finish_reason,
)
from labkit.serving.engine import Engine

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
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": WEATHER_PARAMETERS,
    },
}
ADD = {
    "type": "function",
    "function": {"name": "add", "description": "Add two integers.", "parameters": ADD_PARAMETERS},
}
PARAMETERS = {"get_weather": WEATHER_PARAMETERS, "add": ADD_PARAMETERS}
PARIS = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
)
SUM = '<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 30}}\n</tool_call>'
PROMPTS = ["What is the weather in Paris?", "What is 12 plus 30?", "Tell me a joke."]


def function(name, **fields):
    return {"type": "function", "function": {"name": name, **fields}}


# --- tools and tool_choice, checked at the door ------------------------------------------------------


def test_tools_are_read_from_openai_objects():
    weather, add = check_tools([WEATHER, ADD])
    assert (weather.name, weather.description, weather.parameters) == (
        "get_weather",
        "Current weather in a city.",
        WEATHER_PARAMETERS,
    )
    assert weather.to_openai() == WEATHER and add.name == "add"
    assert Tool.from_openai(function("now")).parameters == {"type": "object", "properties": {}}
    assert check_tools(None) == check_tools([]) == ()


@pytest.mark.parametrize(
    "tools, message",
    [
        ([{"type": "code_interpreter"}], r'tools\[0\]\.type must be "function"'),
        ([WEATHER, {"function": {"name": "x"}}], r'tools\[1\]\.type must be "function"'),
        ([{"type": "function"}], r"tools\[0\]\.function must be an object"),
        (
            [{"type": "function", "function": {}}],
            r"tools\[0\]\.function\.name must be 1 to 64 letters.*got None",
        ),
        (
            [function("get weather")],
            r"tools\[0\]\.function\.name must be 1 to 64 letters, digits, '_' or '-'",
        ),
        ([function("x" * 65)], r"tools\[0\]\.function\.name must be 1 to 64"),
        ([function("f", description=5)], r"tools\[0\]\.function\.description must be text"),
        ([function("f", parameters="a string")], r"tools\[0\]\.function\.parameters must be a JSON schema"),
        (
            [function("f", parameters={"type": "string"})],
            r"tools\[0\]\.function\.parameters must describe an object",
        ),
        (
            [function("f", parameters={"properties": {"a": {"type": "nonsense"}}})],
            r"tools\[0\]\.function\.parameters is not a JSON schema that llguidance can follow: Invalid type",
        ),
        (
            [function("f", parameters={"properties": {"a": {"minLength": -1}}})],
            r"tools\[0\]\.function\.parameters is not a",
        ),
        ([ADD, ADD], r"tools must have different names; add is given more than once"),
        (WEATHER, r"tools must be a list"),
    ],
)
def test_bad_tools_are_refused_naming_the_field(tools, message):
    with pytest.raises(ValueError, match=message):
        ToolSpec.from_openai(tools)


@pytest.mark.parametrize(
    "tools, choice, message",
    [
        ([], "required", r'tool_choice "required" needs tools'),
        (
            [],
            function("add"),
            r"tool_choice names the function 'add', which is not among tools \(none given\)",
        ),
        (
            [WEATHER, ADD],
            function("mul"),
            r"tool_choice names the function 'mul', which is not among tools "
            r"\(get_weather, add\)",
        ),
        ([ADD], "sometimes", r'tool_choice must be "none", "auto", "required" or \{"type": "function"'),
        ([ADD], {"type": "function", "function": {}}, r"tool_choice must be"),
        ([ADD], {"type": "tool", "function": {"name": "add"}}, r"tool_choice must be"),
    ],
)
def test_bad_tool_choice_is_refused_naming_it(tools, choice, message):
    with pytest.raises(ValueError, match=message):
        ToolSpec.from_openai(tools, choice)


def test_tool_choice_defaults_and_parallel_calls_flag():
    tools = check_tools([WEATHER, ADD])
    assert check_tool_choice(None, tools) == ToolChoice("auto") and check_tool_choice(None, ()) == ToolChoice(
        "none"
    )
    assert check_tool_choice({"type": "function", "function": {"name": "add"}}, tools) == ToolChoice(
        "function", "add"
    )
    assert ToolSpec.from_openai(None, "auto").grammar() is None  # nothing to call: plain text
    with pytest.raises(ValueError, match=r"parallel_tool_calls must be true or false, got 'yes'"):
        ToolSpec.from_openai([ADD], "auto", parallel_tool_calls="yes")


# --- the grammar, on strings ------------------------------------------------------------------------


def follows(grammar, text, tokenizer):
    """Whether the whole of `text` is an answer the grammar allows (a matcher fed its tokens, then done)."""
    matcher = llguidance.LLMatcher(grammar_vocabulary(tokenizer), compiled_lark(grammar), log_level=0)
    ids = tokenizer.encode(text, add_special_tokens=False)
    return matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting()


def grammar(choice, parallel=True):
    spec = ToolSpec.from_openai([WEATHER, ADD], choice, parallel)
    return DecodingConfig(grammar=spec.grammar()).grammar  # the option takes it as it is


@pytest.mark.parametrize(
    "choice, parallel, accepted, refused",
    [
        (
            "required",
            True,
            [PARIS, SUM, PARIS + "\n" + SUM],
            [
                "Paris is sunny.",
                "",
                PARIS.replace("Paris", "P" * 21),
                PARIS.replace('"celsius"', '"kelvin"'),
                SUM.replace("add", "mul"),
                SUM.replace('"a": 12, ', ""),
                SUM.replace("30", "30.5"),
                SUM.replace("}}", ', "c": 1}}'),
                SUM.replace('"a": 12', '"a":12'),
                SUM + SUM,
            ],
        ),
        ("required", False, [PARIS, SUM], [PARIS + "\n" + SUM, "Paris is sunny."]),
        (function("add"), True, [SUM, SUM + "\n" + SUM], [PARIS, "Twelve."]),
        (
            "auto",
            True,
            ["Paris is sunny.", "<b>a tag</b>", PARIS, PARIS + "\n" + SUM],
            [
                "",
                "I will call it: " + SUM,
                "<tool_call>\nthe weather\n</tool_call>",
                SUM.replace("add", "mul"),
            ],
        ),
        ("auto", False, ["Paris is sunny.", SUM], [PARIS + "\n" + SUM]),
    ],
)
def test_grammar_allows_exactly_valid_calls(tokenizer, choice, parallel, accepted, refused):
    rules = grammar(choice, parallel)
    assert [text for text in accepted if not follows(rules, text, tokenizer)] == []
    assert [text for text in refused if follows(rules, text, tokenizer)] == []


def test_tool_choice_none_has_no_grammar_and_no_tools_in_the_prompt(tokenizer):
    spec = ToolSpec.from_openai([WEATHER], "none")
    assert spec.grammar() is None and spec.offered == ()
    assert tool_chat_prompt(tokenizer, "Hi", spec) == labkit.chat_prompt(tokenizer, "Hi")
    assert spec.parse(PARIS) == (PARIS, [])  # "none": calls the model writes anyway are text


def test_grammar_option_is_checked_and_masks_after_the_penalties(tokenizer):
    config = DecodingConfig(grammar=grammar("auto"), repetition_penalty=1.1, temperature=0.7)
    names = [repr(t).split("(")[0] for t in config.with_tokenizer(tokenizer).transforms(3, {2})]
    assert names == ["repetition_penalty", "grammar_mask", "apply_temperature"]
    with pytest.raises(ValueError, match=r"grammar needs the tokenizer's vocabulary.*with_tokenizer"):
        config.transforms(3, {2})
    for bad, message in [
        (5, r"grammar must be a Lark grammar \(text"),
        ("  ", r"grammar must be a Lark grammar"),
        (
            'start: "a" | b',
            r"grammar is not a Lark grammar that llguidance can follow: .*unknown "
            r"name: \"b\"",
        ),
        ('start: %json {"type": "nonsense"}', r"grammar is not .*Invalid type"),
    ]:
        with pytest.raises(ValueError, match=message):
            DecodingConfig(grammar=bad)
    with pytest.raises(
        ValueError, match=r"json_schema and grammar are two constraints on one answer: give one"
    ):
        DecodingConfig(grammar='start: "a"', json_schema=True)


# --- reading calls back -----------------------------------------------------------------------------


def test_parse_reads_calls_with_fresh_ids():
    tools = check_tools([WEATHER, ADD])
    content, calls = parse_tool_calls(PARIS + "\n" + SUM, tools)
    assert content is None and [(c.name, c.arguments) for c in calls] == [
        ("get_weather", {"city": "Paris", "unit": "celsius"}),
        ("add", {"a": 12, "b": 30}),
    ]
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", call.id) for call in calls) and calls[0].id != calls[1].id
    assert json.loads(calls[1].arguments_json) == {"a": 12, "b": 30}
    assert calls[1].to_openai() == {
        "id": calls[1].id,
        "type": "function",
        "function": {"name": "add", "arguments": calls[1].arguments_json},
    }
    assert parse_tool_calls("Let me add.\n" + SUM, tools)[0] == "Let me add."
    assert tool_finish_reason("eos", calls) == "tool_calls" and tool_finish_reason("length", []) == "length"


@pytest.mark.parametrize(
    "text",
    [
        "Paris is sunny.",
        "<tool_call>\n{not JSON}\n</tool_call>",
        SUM.replace("add", "mul"),
        SUM.replace("12", '"twelve"'),
        PARIS + "\n" + SUM.replace('"b": 30', '"b": 3000'),
        SUM[:-5],
    ],
)
def test_parse_returns_no_call_a_tool_could_not_take(text):
    assert parse_tool_calls(text, check_tools([WEATHER, ADD])) == (text, [])


# --- the prompt -------------------------------------------------------------------------------------

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris, and 12 + 30?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "add", "arguments": {"a": 12, "b": 30}},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
    {"role": "tool", "tool_call_id": "call_2", "content": "42"},
]


def test_conversation_with_calls_and_results_renders(tokenizer):
    spec = ToolSpec.from_openai([WEATHER, ADD])
    text = tokenizer.decode(tool_chat_prompt(tokenizer, CONVERSATION, spec))
    tools = "\n".join(json.dumps(tool) for tool in (WEATHER, ADD))
    assert (
        text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n\n")
        and f"<tools>\n{tools}\n</tools>" in text
    )
    assert text.endswith(
        "<|im_start|>user\nWeather in Paris, and 12 + 30?<|im_end|>\n"
        f"<|im_start|>assistant\n{PARIS}\n{SUM}<|im_end|>\n"
        '<|im_start|>user\n<tool_response>\n{"temperature": 21}\n</tool_response>\n'
        "<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {3: {"role": "tool", "tool_call_id": "call_9", "content": "x"}},
            r"messages\[3\]\.tool_call_id must be the id of an earlier assistant tool call \(call_1, call_2\)",
        ),
        ({2: {"role": "assistant", "content": None}}, r"messages\[2\]\.content must be text"),
        (
            {
                2: {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c", "function": {"name": "add", "arguments": "{a"}}],
                }
            },
            r"messages\[2\]\.tool_calls\[0\]\.function\.arguments must be a JSON object",
        ),
        (
            {1: {"role": "robot", "content": "hi"}},
            r"messages\[1\]\.role must be one of system, user, assistant, tool",
        ),
    ],
)
def test_bad_messages_are_refused_naming_the_field(tokenizer, change, message):
    messages = [change.get(index, item) for index, item in enumerate(CONVERSATION)]
    with pytest.raises(ValueError, match=message):
        tool_chat_prompt(tokenizer, messages, [WEATHER, ADD])


def test_a_template_that_reads_tools_is_given_them(tokenizer):
    reads_tools = copy.copy(tokenizer)
    reads_tools.chat_template = (
        "{% for tool in tools %}[{{ tool.function.name }}]{% endfor %}{% for m in messages %}"
        "{{ m.role }}:{{ m.name or '' }}:{{ m.tool_calls[0].function.arguments.city ~ "
        "m.tool_calls[1].function.arguments.b if m.tool_calls else m.content }}|{% endfor %}"
    )
    text = reads_tools.decode(tool_chat_prompt(reads_tools, CONVERSATION, [WEATHER, ADD]))
    assert text == (
        "[get_weather][add]system::Be brief.|user::Weather in Paris, and 12 + 30?|assistant::Paris30|"
        'tool:get_weather:{"temperature": 21}|tool:add:42|'
    )


# --- tool calls through the engine (tiny model) and from the real model --------------------------------


def test_engine_follows_the_tool_grammar_like_generate(tiny, tokenizer, one_thread):
    specs = [
        ToolSpec.from_openai([WEATHER, ADD], "required", False),
        ToolSpec.from_openai([WEATHER, ADD], "auto"),
        ToolSpec.from_openai([WEATHER, ADD], function("add"), False),
    ]
    requests = [
        (spec, {"grammar": spec.grammar(), "temperature": 1.0, "seed": seed})
        for seed, spec in enumerate(specs)
    ]
    engine = Engine(tiny, tokenizer, max_num_seqs=4)
    ids = [
        engine.add_request(tool_chat_prompt(tokenizer, "Hi", spec), max_new_tokens=60, **options)
        for spec, options in requests
    ]
    engine.run_until_done()
    for request_id, (spec, options) in zip(ids, requests):
        seq = engine.release(request_id)
        assert seq.output_ids == labkit.generate_ids(
            tiny, tokenizer, tool_chat_prompt(tokenizer, "Hi", spec), max_new_tokens=60, **options
        )
        if spec.choice.mode != "auto":
            assert seq.finish_reason == "eos"
            assert len(spec.parse(tokenizer.decode(seq.output_ids[:-1]))[1]) == 1


def calls_of(model, tokenizer, spec, prompt, **options):
    """For a question or a chat: the answer's finish reason, content and calls; each call fits its tool's parameters."""
    ids = tool_chat_prompt(tokenizer, prompt, spec)
    steps = list(labkit.generate(model, tokenizer, ids, grammar=spec.grammar(), max_new_tokens=60, **options))
    content, calls = spec.parse("".join(step.text for step in steps))
    for call in calls:
        jsonschema.validate(call.arguments, PARAMETERS[call.name])
    return steps[-1].finish_reason, content, calls


@pytest.mark.slow
@pytest.mark.parametrize("choice", ["required", function("get_weather")], ids=["required", "named"])
def test_real_model_calls_fit_their_tools(smollm2_labkit, tokenizer, choice):
    spec = ToolSpec.from_openai([WEATHER, ADD], choice, parallel_tool_calls=False)
    for seed, prompt in enumerate(PROMPTS):
        for options in ({}, {"temperature": 1.0, "seed": seed}):
            finish, content, calls = calls_of(smollm2_labkit, tokenizer, spec, prompt, **options)
            assert (finish, content, len(calls)) == ("eos", None, 1), (prompt, options)
            assert choice == "required" or calls[0].name == "get_weather"


@pytest.mark.slow
def test_real_model_parallel_calls_and_auto(smollm2_labkit, tokenizer):
    spec = ToolSpec.from_openai([WEATHER, ADD], "required")
    ids = tool_chat_prompt(tokenizer, PROMPTS[1], spec)
    text = labkit.generate_text(smollm2_labkit, tokenizer, ids, grammar=spec.grammar(), max_new_tokens=60)
    # the last may be cut by max_new_tokens
    whole_calls = text[: text.rfind("</tool_call>") + len("</tool_call>")]
    assert len(spec.parse(whole_calls)[1]) >= 1
    auto = ToolSpec.from_openai([WEATHER, ADD], "auto", parallel_tool_calls=False)
    for prompt, options in zip(PROMPTS[1:], ({}, {"temperature": 1.0, "seed": 0})):
        finish, content, calls = calls_of(smollm2_labkit, tokenizer, auto, prompt, **options)
        assert (content is None and len(calls) == 1) or (
            not calls and content and "<tool_call>" not in content
        )
    finish, content, calls = calls_of(smollm2_labkit, tokenizer, auto, CONVERSATION)
    assert (content is None and len(calls) == 1) or (not calls and content)
