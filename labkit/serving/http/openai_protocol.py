"""The OpenAI-compatible request bodies, as pydantic models (vLLM's `entrypoints/openai/protocol.py`):
each parses its route's JSON and has ONE conversion to a DecodingConfig.

Fields are checked for their JSON type here; decoding values (ranges, stop strings, schemas) are checked
by DecodingConfig, the one validator of decoding options, and a refusal names the client's field. The
published schema states the same ranges, read from DecodingConfig's rules (`json_schema.option_range`).
What the engine is asked for besides the config: `n` samples (at least 1; the server refuses more than its
seats) and `engine_logprobs`, the alternatives each token's log-probability lists (None: none recorded),
from chat's `logprobs` + `top_logprobs` (0-20; top_logprobs needs logprobs true, as OpenAI says) or
completions' integer `logprobs` (0-5, OpenAI's limit).

vLLM's `thinking_token_budget` is DecodingConfig's thinking_budget (labkit.decoding.thinking): once a
thinking section has this many tokens, its end marker "</think>" is forced. It budgets a section the
prompt opens (a completions prompt from `labkit.decoding.thinking.thinking_prompt`, which ends in
"<think>\n") or the model opens by writing "<think>"; SmolLM2's chat template opens none, so on the chat
route it acts only when the model writes the marker. The thinking stays in the answer's text (no
reasoning parser splits it off).

Chat's `tools`, `tool_choice` and `parallel_tool_calls` are checked together as a ToolSpec (`tool_calls`;
a 400 names 'tools[0].function.name', 'tool_choice', ...), whose grammar joins the DecodingConfig. Its
messages may be assistant messages with `tool_calls` (content null) and `role: "tool"` results with the
`tool_call_id` they answer; labkit.decoding.tool_prompt checks and renders them.

    >>> body = parse(ChatCompletionRequest, {"model": "smollm2-135m", "messages": [...], "top_k": -1, "stop": "."})
    >>> body.decoding_config(default_max_tokens=200)
    DecodingConfig(max_new_tokens=200, temperature=1.0, top_k=0, stop=('.',), ...)
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Field, ValidationInfo, field_validator

from labkit.decoding.config import DecodingConfig
from labkit.decoding.tools import ToolSpec
from labkit.serving.http.fields import (
    NoSuffix,
    PromptRequest,
    RequestModel,
    Strings,
    either,
    int_within,
    needs_logprobs,
    own_error,
    refused,
)
from labkit.serving.http.json_schema import option_range, stated
from labkit.serving.http.model_service import decoding_config
from labkit.serving.http.server_options import MAX_DRAFT
from labkit.serving.http.tool_calls import request_tools, tool_grammar
from labkit.serving.request import MAX_LOGPROBS

# Request field -> DecodingConfig field: OpenAI's, then vLLM's extras.
SAMPLING = {
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "stop": "stop",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "min_tokens": "min_new_tokens",
    "thinking_token_budget": "thinking_budget",
}
DEFAULT_TEMPERATURE = 1.0  # OpenAI's and vLLM's default
MAX_COMPLETION_LOGPROBS = 5  # OpenAI's limit on the completions API's integer `logprobs`
NoEcho = refused("the prompt is not echoed.")
NoTools = refused(
    "a completion continues a prompt and calls no tools; tools are offered on /v1/chat/completions."
)
NoBeamSearch = refused("the engine samples (n samples per request); it has no beam search.")
NoIgnoreEos = refused("the engine always stops at EOS.")


def at_least_one(n: int) -> int:
    """`n`, the choices to return: 1 or more (the server refuses more than its seats when it submits)."""
    if n < 1:
        raise own_error("must be an integer of 1 or more (the choices to return), got {n}.", n=n)
    return n


def token_id_keys(bias: dict[str, float]) -> dict[str, float]:
    """`logit_bias` with token-id keys, as JSON writes them: {"50256": -100} passes, {"the": 5} is refused."""
    if not all(key.isdigit() for key in bias):
        raise own_error("keys must be token ids (strings of digits).")
    return bias


def one_prompt(prompt: Any) -> Any:
    """["text"] -> "text": an array of one string is one prompt."""
    return (
        prompt[0] if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str) else prompt
    )


class StreamOptions(RequestModel):
    include_usage: bool = False  # one more chunk, with usage and no choices, before [DONE]


class JsonSchemaSpec(RequestModel):
    name: str = Field(description="the schema's name")
    schema_: dict = Field(alias="schema", description="a JSON schema object")
    strict: bool | None = None  # labkit always follows the schema, strict or not


class ResponseFormat(RequestModel):
    """{"type": "text"} (the default), {"type": "json_object"}, or {"type": "json_schema", "json_schema": {...}}."""

    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: JsonSchemaSpec | None = Field(None, validate_default=True)

    @field_validator("json_schema")
    @classmethod
    def given_for_json_schema(
        cls, spec: JsonSchemaSpec | None, info: ValidationInfo
    ) -> JsonSchemaSpec | None:
        if spec is None and info.data.get("type") == "json_schema":
            raise own_error('is required when type is "json_schema": an object with "name" and "schema".')
        return spec


class OpenAIRequest(PromptRequest):
    """What chat completions and completions share: streaming, limits and sampling (OpenAI's and vLLM's)."""

    VOCABULARY_FIELDS: ClassVar[dict[str, str]] = {"logit_bias": "logit_bias"}
    stream: bool = False
    stream_options: StreamOptions = Field(default_factory=StreamOptions)
    max_tokens: Annotated[int, option_range("max_new_tokens")] | None = None
    max_completion_tokens: Annotated[int, option_range("max_new_tokens")] | None = (
        None  # wins over max_tokens
    )
    temperature: Annotated[float, option_range("temperature")] = DEFAULT_TEMPERATURE
    top_p: Annotated[float, option_range("top_p")] | None = None
    seed: int | None = None
    presence_penalty: Annotated[float, option_range("presence_penalty")] | None = None
    frequency_penalty: Annotated[float, option_range("frequency_penalty")] | None = None
    stop: Strings | None = None
    top_k: Annotated[int, stated(minimum=-1)] | None = None  # vLLM: -1 turns it off; else top_k's rule, >= 0
    min_p: Annotated[float, option_range("min_p")] | None = None
    repetition_penalty: Annotated[float, option_range("repetition_penalty")] | None = None
    min_tokens: Annotated[int, option_range("min_new_tokens")] | None = None
    n: Annotated[int, AfterValidator(at_least_one), stated(minimum=1)] = 1
    logit_bias: Annotated[dict[str, float], AfterValidator(token_id_keys)] = Field(
        default_factory=dict, json_schema_extra={"propertyNames": {"pattern": "^[0-9]+$"}}
    )
    response_format: ResponseFormat = Field(default_factory=ResponseFormat)
    thinking_token_budget: int | None = None  # vLLM: thinking tokens before "</think>" is forced (module doc)
    # llama-server's per-request speculation: at most this many draft tokens a step (0: none), within the
    # server's --speculative-tokens; absent: the server's
    speculative_n_max: int_within(0, MAX_DRAFT, "draft tokens a step") | None = Field(
        None, alias="speculative.n_max"
    )
    suffix: NoSuffix = None
    echo: NoEcho = None
    use_beam_search: NoBeamSearch = None
    ignore_eos: NoIgnoreEos = None

    @property
    def samples(self) -> int:
        return self.n

    @property
    def max_draft(self) -> int | None:
        return self.speculative_n_max

    @property
    def engine_fields(self) -> dict[str, str]:
        return {**super().engine_fields, "n": "n"}

    @property
    def limit_field(self) -> str:
        """The field that sets how many new tokens: max_completion_tokens if given, else max_tokens."""
        return "max_tokens" if self.max_completion_tokens is None else "max_completion_tokens"

    def decoding_config(self, default_max_tokens: int) -> DecodingConfig:
        """The request as a DecodingConfig, built once (a 400 names the client's field)."""
        return decoding_config(self.chosen_options(default_max_tokens))

    def chosen_options(self, default_max_tokens: int) -> dict[str, tuple[str, object]]:
        """DecodingConfig field -> (the client's field, value): top_k -1 is off, one stop string is a list,
        logit_bias keys are token ids, response_format is json_schema, and default_max_tokens when no limit is
        given."""
        chosen = {
            field: (name, getattr(self, name))
            for name, field in SAMPLING.items()
            if getattr(self, name) is not None
        }
        if self.top_k == -1:
            chosen["top_k"] = ("top_k", 0)
        if isinstance(self.stop, str):
            chosen["stop"] = ("stop", [self.stop])
        if self.logit_bias:
            chosen["logit_bias"] = ("logit_bias", {int(key): bias for key, bias in self.logit_bias.items()})
        limit = self.max_tokens if self.max_completion_tokens is None else self.max_completion_tokens
        chosen["max_new_tokens"] = (self.limit_field, default_max_tokens if limit is None else limit)
        kind, spec = self.response_format.type, self.response_format.json_schema
        if kind == "json_object":
            chosen["json_schema"] = ("response_format", True)
        elif kind == "json_schema":
            chosen["json_schema"] = ("response_format.json_schema.schema", spec.schema_)
        return chosen


class TextPart(RequestModel):
    type: Literal["text"]
    text: str


class ChatMessage(RequestModel):
    """One message: its role and text; an assistant's may hold its tool_calls (content null), a tool's
    answers the call tool_call_id names. labkit.decoding.tool_prompt checks the turns and renders them."""

    role: str = Field(
        description='"system", "user", "assistant" or "tool" ("developer" reads as "system")',
        json_schema_extra={"enum": ["system", "developer", "user", "assistant", "tool"]},
    )
    content: (
        Annotated[
            str | list[TextPart],
            either('a string or an array of {"type": "text", "text": ...} parts (the model reads text only)'),
        ]
        | None
    ) = None
    tool_calls: list[dict] | None = (
        None  # an assistant's calls: [{"id", "type": "function", "function": {...}}]
    )
    tool_call_id: str | None = None  # a tool message: the id of the call it answers

    def as_chat(self) -> dict:
        """The message for labkit.decoding.tool_prompt: text parts joined, 'developer' read as 'system', the
        tool fields kept when given."""
        text = (
            self.content
            if not isinstance(self.content, list)
            else "".join(part.text for part in self.content)
        )
        message = {"role": "system" if self.role == "developer" else self.role, "content": text}
        tool_fields = {"tool_calls": self.tool_calls, "tool_call_id": self.tool_call_id}
        return {**message, **{name: value for name, value in tool_fields.items() if value is not None}}


class ChatCompletionRequest(OpenAIRequest):
    """POST /v1/chat/completions, with OpenAI's tools (`tool_calls` module doc)."""

    PROMPT_FIELD: ClassVar[str] = "messages"
    # checked by tool_prompt
    messages: list[ChatMessage] = Field(
        description='an array of {"role", "content"} objects', json_schema_extra={"minItems": 1}
    )
    logprobs: bool = False
    top_logprobs: (
        Annotated[int_within(0, MAX_LOGPROBS, "alternatives per token"), needs_logprobs(0)] | None
    ) = None
    tools: Any = None  # [{"type": "function", "function": {"name", "description", "parameters"}}, ...]
    tool_choice: Any = None  # "none", "auto", "required" or {"type": "function", "function": {"name"}}
    parallel_tool_calls: bool = True  # False: at most one call an answer

    @property
    def engine_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    @cached_property
    def tool_spec(self) -> ToolSpec:
        """The tools, tool_choice and parallel_tool_calls, checked together (a 400 names the field at fault)."""
        return request_tools(self.tools, self.tool_choice, self.parallel_tool_calls)

    def chosen_options(self, default_max_tokens: int) -> dict[str, tuple[str, object]]:
        """OpenAIRequest's options, with the tools' grammar when tools are offered (response_format or a
        thinking budget beside them is refused)."""
        constraints = {
            "response_format": self.response_format.type != "text",
            "thinking_token_budget": self.thinking_token_budget is not None,
        }
        grammar = tool_grammar(self.tool_spec, constraints)
        chosen = super().chosen_options(default_max_tokens)
        return chosen if grammar is None else {**chosen, "grammar": ("tools", grammar)}


class CompletionRequest(OpenAIRequest):
    """POST /v1/completions: one prompt, as text or token ids; 16 new tokens unless told (OpenAI's default)."""

    DEFAULT_MAX_TOKENS: ClassVar[int | None] = 16
    PROMPT_FIELD: ClassVar[str] = "prompt"
    prompt: Annotated[
        Annotated[str, stated(minLength=1)] | Annotated[list[int], Field(min_length=1)],
        BeforeValidator(one_prompt),
        either("a string, an array of one string, or a non-empty array of token ids: one prompt per request"),
    ] = Field(description="a non-empty string or a non-empty array of token ids")
    logprobs: int_within(0, MAX_COMPLETION_LOGPROBS, "alternatives per token") | None = None
    tools: NoTools = None

    @property
    def engine_logprobs(self) -> int | None:
        return self.logprobs
