"""Ollama's request bodies (api/types.go), as pydantic models: each parses its route's JSON, and the two that
generate have ONE conversion to a DecodingConfig.

Fields are checked for their JSON type here; decoding values (ranges, stop strings, schemas) are checked
by DecodingConfig, the one validator of decoding options, and a refusal names the client's field
(`options.top_p`); the published schema states the same ranges (`json_schema.option_range`). Ollama's
defaults apply to options a client leaves out. `logprobs` and `top_logprobs` (0-20) ask for each token's
log-probability (`engine_logprobs`); Ollama has no `n`. /api/chat takes `tools` (OpenAI's function
objects) and tool turns: assistant `tool_calls` with arguments as objects, and `role: "tool"` results
named by `tool_name` (`tool_calls` module doc).

    >>> body = parse(GenerateRequest, {"model": "smollm2-135m", "prompt": "Hi", "options": {"num_predict": 8}})
    >>> body.decoding_config(default_max_tokens=200)
    DecodingConfig(max_new_tokens=8, temperature=0.8, top_k=40, top_p=0.9, ...)
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, ConfigDict, Field

from labkit.decoding.config import DecodingConfig
from labkit.decoding.tools import ToolSpec
from labkit.serving.http.fields import (
    ModelRequest,
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
from labkit.serving.http.tool_calls import request_tools, tool_grammar
from labkit.serving.request import MAX_LOGPROBS

# Ollama option -> DecodingConfig field (num_predict is read apart: -1 and -2 mean "no limit").
OPTIONS = {
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "typical_p": "typical_p",
    "repeat_penalty": "repetition_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "seed": "seed",
    "stop": "stop",
}
NoImages = refused("the model reads text only.")
NoThinking = refused("the model has no thinking mode.")
NoTemplate = refused("the model's own chat template is always used.")
NoContext = refused("pass the conversation as /api/chat messages instead.")
LoadTime = Any  # a load-time option: labkit sizes the model and its cache itself, so it changes nothing
FILL_CONTEXT = -2  # options.num_predict's least value: new tokens up to the context


def num_predict_value(limit: int) -> int:
    """`options.num_predict` as Ollama reads it: a count, -1 (no limit) or -2 (fill the context); -5 is refused."""
    if limit < FILL_CONTEXT:
        raise own_error("must be -1 (no limit), -2 (fill the context) or >= 0, got {limit}.", limit=limit)
    return limit


class Options(RequestModel):
    """`options`: the sampling options labkit reads, with Ollama's defaults (DefaultOptions, api/types.go);
    the load-time ones are accepted and ignored, any other is refused."""

    model_config = ConfigDict(extra="forbid")
    temperature: Annotated[float, option_range("temperature")] = 0.8
    top_k: Annotated[int, option_range("top_k")] = 40
    top_p: Annotated[float, option_range("top_p")] = 0.9
    min_p: Annotated[float, option_range("min_p")] | None = None
    typical_p: Annotated[float, option_range("typical_p")] | None = None
    repeat_penalty: Annotated[float, option_range("repetition_penalty")] | None = None
    presence_penalty: Annotated[float, option_range("presence_penalty")] | None = None
    frequency_penalty: Annotated[float, option_range("frequency_penalty")] | None = None
    seed: int | None = None
    stop: Strings | None = None
    # -1: no limit
    num_predict: Annotated[int, AfterValidator(num_predict_value), stated(minimum=FILL_CONTEXT)] = -1
    num_ctx: LoadTime = None
    num_batch: LoadTime = None
    num_gpu: LoadTime = None
    main_gpu: LoadTime = None
    use_mmap: LoadTime = None
    use_mlock: LoadTime = None
    num_thread: LoadTime = None
    num_keep: LoadTime = None
    low_vram: LoadTime = None
    vocab_only: LoadTime = None
    numa: LoadTime = None


OPTIONS_TAKEN = f"{', '.join([*OPTIONS, 'num_predict'])} (and ignores the load-time options)"


class GenerationRequest(PromptRequest):
    """What /api/generate and /api/chat share: streaming (on by default), `format` and `options`."""

    stream: bool = True
    format: Annotated[Literal["", "json"] | dict, either('"json" or a JSON schema object')] = ""
    options: Options = Field(default_factory=Options, description=OPTIONS_TAKEN)
    keep_alive: Annotated[str | float, either("a duration (string or number)")] | None = None
    logprobs: bool = False  # each token's log-probability in the answer, with top_logprobs alternatives
    top_logprobs: (
        Annotated[int_within(0, MAX_LOGPROBS, "alternatives per token"), needs_logprobs(1)] | None
    ) = None
    think: NoThinking = None
    images: NoImages = None
    suffix: NoSuffix = None
    template: NoTemplate = None
    context: NoContext = None
    limit_field: ClassVar[str] = "options.num_predict"

    @property
    def engine_logprobs(self) -> int | None:
        """Alternatives each token's log-probability lists (0: the chosen token's alone); None: not asked for.
        Ollama ignores top_logprobs without logprobs; labkit refuses a top_logprobs above 0 without it."""
        return (self.top_logprobs or 0) if self.logprobs else None

    def decoding_config(self, default_max_tokens: int) -> DecodingConfig:
        """The request as a DecodingConfig, built once (a 400 names the client's field)."""
        return decoding_config(self.chosen_options(default_max_tokens))

    def chosen_options(self, default_max_tokens: int) -> dict[str, tuple[str, object]]:
        """DecodingConfig field -> (the client's field, value): one stop string is a list, num_predict < 0 is
        default_max_tokens, format "json" is any JSON object and a schema object is that schema."""
        chosen = {
            field: (f"options.{name}", getattr(self.options, name))
            for name, field in OPTIONS.items()
            if getattr(self.options, name) is not None
        }
        if isinstance(self.options.stop, str):
            chosen["stop"] = ("options.stop", [self.options.stop])
        limit = self.options.num_predict
        chosen["max_new_tokens"] = (self.limit_field, default_max_tokens if limit < 0 else limit)
        if self.format != "":
            chosen["json_schema"] = ("format", True if self.format == "json" else self.format)
        return chosen


class GenerateRequest(GenerationRequest):
    """POST /api/generate: a prompt, through the chat template unless `raw`; an empty prompt only loads."""

    PROMPT_FIELD: ClassVar[str] = "prompt"
    prompt: str = ""
    system: str | None = None
    raw: bool = False

    def chat(self) -> list[dict]:
        """The prompt as the chat the template renders: the system message (if any), then the user's."""
        return ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": self.prompt}
        ]


class Message(RequestModel):
    """One message; an assistant's may hold its tool_calls, a tool's result names its tool (tool_name)."""

    role: str = Field(
        description='"system", "user", "assistant" or "tool"',
        json_schema_extra={"enum": ["system", "user", "assistant", "tool"]},
    )
    content: str = ""  # the message's text (the client leaves it out beside tool_calls)
    images: NoImages = None
    tool_calls: list[dict] | None = None  # [{"function": {"name", "arguments": {...}}}], arguments an object
    tool_name: str | None = None  # a tool message: the tool whose result it is
    tool_call_id: str | None = None  # a tool message: the id of the call it answers (newer Ollama servers)

    def as_chat(self) -> dict:
        """The message as labkit.decoding.tool_prompt's (OpenAI's) until tool_calls.openai_messages gives ids."""
        return self.model_dump(
            include={"role", "content", "tool_calls", "tool_name", "tool_call_id"}, exclude_none=True
        )


class ChatRequest(GenerationRequest):
    """POST /api/chat, with tools (Ollama has no tool_choice: "auto" when tools are given)."""

    PROMPT_FIELD: ClassVar[str] = "messages"
    # checked by tool_prompt
    messages: list[Message] = Field(
        description='an array of {"role", "content"} objects', json_schema_extra={"minItems": 1}
    )
    tools: Any = None  # [{"type": "function", "function": {"name", "description", "parameters"}}, ...]

    @cached_property
    def tool_spec(self) -> ToolSpec:
        """The tools, checked (a 400 names the field at fault)."""
        return request_tools(self.tools)

    def chosen_options(self, default_max_tokens: int) -> dict[str, tuple[str, object]]:
        """GenerationRequest's options, with the tools' grammar when tools are given (`format` beside them is
        refused)."""
        grammar = tool_grammar(self.tool_spec, {"format": self.format != ""})
        chosen = super().chosen_options(default_max_tokens)
        return chosen if grammar is None else {**chosen, "grammar": ("tools", grammar)}


class ShowRequest(ModelRequest):
    """POST /api/show: which model to describe."""
