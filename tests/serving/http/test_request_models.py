"""Both protocols' request models without a server (microseconds): pydantic parses each body, a refusal names
the client's field and says what is allowed, and each model's one conversion gives the DecodingConfig that
vLLM's and Ollama's semantics ask for (defaults, -1 meaning off, one stop string, token-id keys, formats)."""

import pytest

from labkit.serving.http.errors import ClientError
from labkit.serving.http.fields import parse
from labkit.serving.http.ollama_protocol import ChatRequest, GenerateRequest, ShowRequest
from labkit.serving.http.openai_protocol import ChatCompletionRequest, CompletionRequest

HI = [{"role": "user", "content": "Hi"}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
DEFAULT_MAX = 100  # what the server would allow when the client sets no limit


def openai_config(**fields):
    return parse(ChatCompletionRequest, {"model": "m", "messages": HI, **fields}).decoding_config(DEFAULT_MAX)


def ollama_config(**fields):
    return parse(GenerateRequest, {"model": "m", "prompt": "Hi", **fields}).decoding_config(DEFAULT_MAX)


def refused(call) -> ClientError:
    with pytest.raises(ClientError) as caught:
        call()
    assert caught.value.status == 400
    return caught.value


def test_openai_conversion_follows_vllm():
    config = openai_config(
        top_k=-1,
        stop=".",
        logit_bias={"5": 3},
        max_tokens=9,
        max_completion_tokens=7,
        seed=1,
        min_tokens=2,
        repetition_penalty=1.1,
    )
    assert (config.temperature, config.top_k, config.stop, config.logit_bias) == (1.0, 0, (".",), {5: 3.0})
    assert (config.max_new_tokens, config.seed, config.min_new_tokens, config.repetition_penalty) == (
        7,
        1,
        2,
        1.1,
    )
    assert (
        openai_config().max_new_tokens == DEFAULT_MAX and openai_config(temperature=None).temperature == 1.0
    )
    assert openai_config(response_format={"type": "text"}).json_schema is None
    assert openai_config(response_format={"type": "json_object"}).json_schema == {"type": "object"}
    spec = {"name": "city", "schema": SCHEMA, "strict": True}
    assert openai_config(response_format={"type": "json_schema", "json_schema": spec}).json_schema == SCHEMA
    # sampling-only options are checked, then dropped
    greedy = openai_config(temperature=0, top_p=0.5, top_k=3)
    assert (greedy.temperature, greedy.top_p, greedy.top_k) == (0.0, 1.0, 0)


def test_completions_take_one_prompt_as_text_or_token_ids():
    assert parse(CompletionRequest, {"model": "m", "prompt": ["Once"]}).prompt == "Once"
    assert parse(CompletionRequest, {"model": "m", "prompt": [1, 2, 3]}).prompt == [1, 2, 3]
    for prompt in ([], ["a", "b"], [[1, 2], [3]], [1, True]):
        error = refused(lambda: parse(CompletionRequest, {"model": "m", "prompt": prompt}))
        assert error.param == "prompt" and "one prompt per request" in error.message


def test_ollama_conversion_applies_ollamas_defaults():
    # load-time options and nulls are ignored
    config = ollama_config(options={"num_ctx": 4096, "min_p": None})
    assert (config.temperature, config.top_k, config.top_p, config.max_new_tokens) == (
        0.8,
        40,
        0.9,
        DEFAULT_MAX,
    )
    greedy = ollama_config(
        options={"temperature": 0, "num_predict": 5, "stop": ",", "repeat_penalty": 1.1}, format="json"
    )
    assert (greedy.temperature, greedy.top_k, greedy.top_p, greedy.max_new_tokens) == (0.0, 0, 1.0, 5)
    assert (greedy.stop, greedy.repetition_penalty, greedy.json_schema) == ((",",), 1.1, {"type": "object"})
    assert ollama_config(options={"num_predict": -2}).max_new_tokens == DEFAULT_MAX
    assert ollama_config(format=SCHEMA).json_schema == SCHEMA and ollama_config(format="").json_schema is None
    chat = parse(ChatRequest, {"model": "m", "messages": HI, "options": {"seed": 3}}).decoding_config(
        DEFAULT_MAX
    )
    assert chat.seed == 3


@pytest.mark.parametrize(
    "kind, body, param, message",
    [
        (
            ChatCompletionRequest,
            {"messages": HI, "temperature": "hot"},
            "temperature",
            "'temperature' must be a number, got a string.",
        ),
        (
            ChatCompletionRequest,
            {"messages": HI, "seed": 1.5},
            "seed",
            "'seed' must be an integer, got a number.",
        ),
        (
            ChatCompletionRequest,
            {"messages": [{"role": 1, "content": "Hi"}]},
            "messages",
            "'messages.0.role' must be a string, got an integer.",
        ),
        (
            ChatCompletionRequest,
            {"messages": HI, "stop": 5},
            "stop",
            "'stop' must be a string or an array of strings",
        ),
        (ChatCompletionRequest, {"messages": HI, "n": 0}, "n", "'n' must be an integer of 1 or more"),
        (
            ChatCompletionRequest,
            {"messages": HI, "logit_bias": {"the": 5}},
            "logit_bias",
            "keys must be token ids",
        ),
        (
            ChatCompletionRequest,
            {"messages": HI, "ignore_eos": True},
            "ignore_eos",
            "'ignore_eos' is not supported",
        ),
        (
            ChatCompletionRequest,
            {"messages": HI, "response_format": {"type": "xml"}},
            "response_format.type",
            'must be "text", "json_object" or "json_schema", got "xml"',
        ),
        (ChatCompletionRequest, {}, "messages", "'messages' is required: an array of"),
        (
            CompletionRequest,
            {"prompt": "Hi", "tools": [{"type": "function"}]},
            "tools",
            "'tools' is not supported",
        ),
        (
            ChatRequest,
            {"messages": [{"role": "user", "content": "Hi", "images": ["..."]}]},
            "messages",
            "'messages.0.images' is not supported",
        ),
        (
            GenerateRequest,
            {"prompt": "Hi", "options": {"mirostat": 2}},
            "options.mirostat",
            "'options.mirostat' is not supported by this server; it takes temperature, top_k",
        ),
        (GenerateRequest, {"prompt": "Hi", "keep_alive": [5]}, "keep_alive", "must be a duration"),
        (ShowRequest, {"model": None}, "model", "'model' is required"),
    ],
)
def test_a_bad_field_is_named_with_what_is_allowed(kind, body, param, message):
    error = refused(lambda: parse(kind, {"model": "m", **body}))
    assert error.param == param and message in error.message


@pytest.mark.parametrize(
    "convert, param, message",
    [
        (lambda: openai_config(top_p=1.5), "top_p", "'top_p' must be in (0, 1]"),
        (
            lambda: openai_config(max_completion_tokens=-1, max_tokens=5),
            "max_completion_tokens",
            "'max_completion_tokens' must be an integer >= 0",
        ),
        (lambda: openai_config(temperature=0, top_p=5), "top_p", "'top_p' must be in (0, 1]"),
        (
            lambda: openai_config(logit_bias={"5": 300}),
            "logit_bias",
            "'logit_bias' values must be numbers in [-100, 100]",
        ),
        (
            lambda: openai_config(
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "colour"}},
                }
            ),
            "response_format.json_schema.schema",
            "'response_format.json_schema.schema' is not",
        ),
        (
            lambda: ollama_config(options={"temperature": 0, "top_p": 1.5}),
            "options.top_p",
            "'options.top_p' must be",
        ),
        (
            lambda: ollama_config(options={"stop": [""]}),
            "options.stop",
            "'options.stop' must be a list of non-empty",
        ),
        (lambda: ollama_config(format={"type": "colour"}), "format", "'format' is not a JSON schema"),
        # found by the fuzzer: a seed past 64 bits reached torch, whose overflow named no field
        (lambda: openai_config(seed=2**70), "seed", "'seed' must be an integer from -2**63 to 2**63 - 1"),
        (
            lambda: ollama_config(options={"seed": 2**70}),
            "options.seed",
            "'options.seed' must be an integer from",
        ),
    ],
)
def test_decoding_config_refusals_name_the_clients_field(convert, param, message):
    error = refused(convert)
    assert error.param == param and message in error.message


# Each bound keyword: the direction out of the range, and whether the bound itself is allowed.
BOUNDS = {
    "minimum": (-1, True),
    "exclusiveMinimum": (-1, False),
    "maximum": (1, True),
    "exclusiveMaximum": (1, False),
}


def stated_bounds(schema: dict):
    """(field, keyword, bound, whole number?) for each range a model's published schema states."""
    for name, field in schema["properties"].items():
        for branch in field.get("anyOf", [field]):
            for keyword in (
                BOUNDS.keys() & branch.keys() if branch.get("type") in ("integer", "number") else ()
            ):
                yield name, keyword, branch[keyword], branch["type"] == "integer"


def accepts(convert, field: str, value: float) -> bool:
    try:
        convert(field, value)
    except ClientError:
        return False
    return True


@pytest.mark.parametrize(
    "schema, convert",
    [
        (
            ChatCompletionRequest.model_json_schema(),
            lambda field, value: openai_config(**{field: value}, logprobs=field == "top_logprobs"),
        ),
        (
            CompletionRequest.model_json_schema(),
            lambda field, value: parse(
                CompletionRequest, {"model": "m", "prompt": "Hi", field: value}
            ).decoding_config(DEFAULT_MAX),
        ),
        (
            GenerateRequest.model_json_schema()["$defs"]["Options"],
            lambda field, value: ollama_config(options={field: value}),
        ),
        (
            GenerateRequest.model_json_schema(),
            lambda field, value: ollama_config(**{field: value}, logprobs=True),
        ),
    ],
    ids=["chat completions", "completions", "ollama options", "ollama generate"],
)
def test_the_published_ranges_are_the_ones_the_server_enforces(schema, convert):
    bounds = list(stated_bounds(schema))
    assert bounds  # e.g. top_p: exclusiveMinimum 0, maximum 1 (from labkit.decoding.option_rules)
    for field, keyword, bound, whole in bounds:
        outward, inclusive = BOUNDS[keyword]
        step = 1 if whole else 0.001
        assert accepts(convert, field, bound) == inclusive, (field, keyword, bound)
        assert accepts(convert, field, bound - outward * step), (field, keyword, "just inside")
        assert not accepts(convert, field, bound + outward * step), (field, keyword, "just outside")
