"""Reading what a client sent: the body as one JSON object, then parsed by the route's pydantic model.

Every refusal is a `ClientError` naming the field and what is allowed, so a client sees 400 (413 for a
body over the limit) with a message it can act on, never a 500. The protocols' models (`openai_protocol`,
`ollama_protocol`) build on `RequestModel`: fields are parsed strictly (no "1" for 1, no 1 for true), a
null counts as absent, unknown fields are ignored (as vLLM and Ollama do), and a field asking for a feature
this server lacks is refused.

    >>> body = await read_json_object(request, max_bytes=1_000_000)
    >>> parse(ChatCompletionRequest, {"model": "smollm2-135m", "messages": [], "stream": "yes"})
    ClientError: 'stream' must be true or false, got a string.
"""

from __future__ import annotations

import json
from itertools import takewhile
from typing import Annotated, Any, ClassVar, TypeVar, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WrapValidator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError
from starlette.requests import Request

from labkit.serving.http.errors import ClientError
from labkit.serving.http.json_schema import null_as_absent, stated

# The JSON names of pydantic's type errors, for "'x' must be <kind>, got <json type>."
KINDS = {
    "string_type": "a string",
    "bool_type": "true or false",
    "int_type": "an integer",
    "float_type": "a number",
    "dict_type": "a JSON object",
    "model_type": "a JSON object",
    "list_type": "an array",
}
JSON_TYPES = (
    (bool, "a boolean"),
    (str, "a string"),
    (int, "an integer"),
    (float, "a number"),
    (dict, "a JSON object"),
    (list, "an array"),
)
OWN_ERROR = "labkit"  # the type of the errors this module's validators raise: their message is already whole


def json_type(value: object) -> str:
    """The JSON name of a value's type, for messages: 'a string', 'null', 'an array', ..."""
    if value is None:
        return "null"
    return next((name for kind, name in JSON_TYPES if isinstance(value, kind)), type(value).__name__)


def _refuse_constant(name: str) -> float:
    raise ClientError(400, f"The body is not valid JSON: {name} is not a JSON number.")


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The raw body, or a 413 as soon as it is known to exceed max_bytes (header or bytes received)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise ClientError(
            413, f"The request body has {declared} bytes; this server accepts at most {max_bytes}."
        )
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise ClientError(
                413, f"The request body is over {max_bytes} bytes, the most this server accepts."
            )
    return bytes(body)


async def read_json_object(request: Request, max_bytes: int) -> dict:
    """The body parsed as one JSON object (400 if it is missing, not JSON, or not an object).

    >>> await read_json_object(request, 1_000_000)
    {'model': 'smollm2-135m', 'prompt': 'Hi'}
    """
    raw = await read_body(request, max_bytes)
    if not raw.strip():
        raise ClientError(400, 'missing request body: send a JSON object such as {"model": ..., ...}.')
    try:
        body = json.loads(raw, parse_constant=_refuse_constant)
    except UnicodeDecodeError:
        raise ClientError(400, "The body is not valid JSON: it is not UTF-8 text.") from None
    except json.JSONDecodeError as error:
        raise ClientError(
            400, f"The body is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}."
        ) from None
    if not isinstance(body, dict):
        raise ClientError(400, f"The body must be a JSON object, got {json_type(body)}.")
    return body


class RequestModel(BaseModel):
    """A JSON object a client sends: strict types, null as absent (its published schema says so), unknown
    fields ignored.

        >>> class Options(RequestModel):
        ...     temperature: float = 1.0
        >>> Options.model_validate({"temperature": None, "mirostat": 2})
        Options(temperature=1.0)
    """

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, json_schema_extra=null_as_absent)

    @model_validator(mode="before")
    @classmethod
    def null_is_absent(cls, data: Any) -> Any:
        """Drop null values, so that a field sent as null takes its default (clients send null for "unset")."""
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class ModelRequest(RequestModel):
    """A body that names the model it is for (every POST route of both protocols)."""

    model: str = Field(description='the name of the served model, e.g. "smollm2-135m"')


class PromptRequest(ModelRequest):
    """A body that asks the engine for tokens (the generating routes of both protocols). The engine checks
    what needs the model (the context rule, token ids against the vocabulary) and names its own arguments
    when it refuses; `engine_fields` renames them to this body's fields.

        >>> CompletionRequest(model="smollm2-135m", prompt="Hi", max_completion_tokens=8).engine_fields
        {'prompt': 'prompt', 'max_new_tokens': 'max_completion_tokens', 'logit_bias': 'logit_bias'}
    """

    PROMPT_FIELD: ClassVar[str]  # the field of the prompt: "prompt" or "messages"
    VOCABULARY_FIELDS: ClassVar[dict[str, str]] = {}  # options of token ids (checked by the engine) -> fields
    # new tokens when the client sets no limit; None: up to the context (ModelService.default_max_tokens)
    DEFAULT_MAX_TOKENS: ClassVar[int | None] = None

    @property
    def samples(self) -> int:
        """How many samples of the prompt the client asks for (OpenAI's `n`; 1 where a protocol has none)."""
        return 1

    @property
    def max_draft(self) -> int | None:
        """The most draft tokens a step the client allows speculation (llama-server's speculative.n_max);
        None: the server's setting."""
        return None

    @property
    def engine_logprobs(self) -> int | None:
        """Alternatives each token's log-probability lists (0: the chosen token's alone); None: not asked for."""
        raise NotImplementedError

    def decoding_config(self, default_max_tokens: int) -> Any:
        """The request's options as one DecodingConfig (a 400 names the client's field)."""
        raise NotImplementedError

    @property
    def limit_field(self) -> str:
        """The field that sets how many new tokens."""
        raise NotImplementedError

    @property
    def engine_fields(self) -> dict[str, str]:
        """The engine's names for what it may refuse -> this body's fields (ModelService.submit): the context
        rule names the prompt or the new tokens, the vocabulary check the option of token ids."""
        return {"prompt": self.PROMPT_FIELD, "max_new_tokens": self.limit_field, **self.VOCABULARY_FIELDS}


def own_error(message: str, **context: object) -> PydanticCustomError:
    """A validation error whose message (after the field's quoted name) is `message`, formatted with `context`."""
    return PydanticCustomError(OWN_ERROR, message, context)


def either(kind: str) -> WrapValidator:
    """One error for a field of several shapes: "'x' must be <kind>, got <json type>." (pydantic reports one
    error per shape, at locations such as ('stop', 'list[str]')).

        >>> Stop = Annotated[str | list[str], either("a string or an array of strings")]
    """

    def validate(value: Any, handler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise own_error("must be {kind}, got {got}.", kind=kind, got=json_type(value)) from None

    return WrapValidator(validate)


def refused(reason: str) -> Any:
    """The type of a field this server refuses when it asks for something (a truthy value, so that clients
    that always send the empty default, e.g. `"tools": []`, still work).

        >>> NoSuffix = refused("fill-in-the-middle is not implemented in labkit.")
    """

    def check(value: Any) -> Any:
        if value:
            raise own_error("is not supported by this server: {reason}", reason=reason)
        return value

    return Annotated[Any, AfterValidator(check)]


def int_within(low: int, high: int, what: str) -> Any:
    """The type of an integer field that must lie in [low, high], checked and stated in the published
    schema; `what` says what it counts.

        >>> TopLogprobs = int_within(0, 20, "alternatives per token")
    """

    def check(value: int) -> int:
        if not low <= value <= high:
            raise own_error(
                "must be an integer from {low} to {high} ({what}), got {value}.",
                low=low,
                high=high,
                what=what,
                value=value,
            )
        return value

    return Annotated[int, AfterValidator(check), stated(minimum=low, maximum=high)]


def needs_logprobs(least: int) -> AfterValidator:
    """The check of `top_logprobs` (declared after `logprobs`): from `least` on, it needs "logprobs": true.

    >>> TopLogprobs = Annotated[int, needs_logprobs(0)]   # OpenAI: any value needs logprobs
    """

    def check(top: int, info: ValidationInfo) -> int:
        if top >= least and info.data.get("logprobs") is not True:
            raise own_error(
                'needs "logprobs": true (it sets how many alternatives each token\'s log-probability '
                "lists), got {top} without it.",
                top=top,
            )
        return top

    return AfterValidator(check)


Strings = Annotated[str | list[str], either("a string or an array of strings")]
NoSuffix = refused("fill-in-the-middle is not implemented in labkit.")

Parsed = TypeVar("Parsed", bound=BaseModel)


def parse(kind: type[Parsed], body: dict) -> Parsed:
    """`body` as a `kind`, or a 400 for its first invalid field (see `refusal`).

    >>> parse(ShowRequest, {"model": "smollm2-135m"})
    ShowRequest(model='smollm2-135m')
    """
    try:
        return kind.model_validate(body)
    except ValidationError as error:
        raise refusal(kind, error.errors(include_url=False)[0]) from None


def refusal(kind: type[BaseModel], error: ErrorDetails) -> ClientError:
    """pydantic's error as a 400 that names the field: its location joined with dots in the message; as
    `param`, the field down to its first array position (OpenAI's params name fields, not items).

        >>> refusal(ChatCompletionRequest, {"type": "bool_type", "loc": ("messages", 0, "role"), "input": 1, ...})
        ClientError(400, "'messages.0.role' must be a string, got an integer.", param="messages")
    """
    loc = error["loc"]
    where = ".".join(str(part) for part in loc)
    param = ".".join(str(part) for part in takewhile(lambda part: isinstance(part, str), loc))
    return ClientError(
        400, f"'{where}' {explain(kind, error)}" if where else explain(kind, error), param or None
    )


def explain(kind: type[BaseModel], error: ErrorDetails) -> str:
    """What was wrong with the field and what is allowed, e.g. "must be a number, got a string."."""
    kind_name, got = KINDS.get(error["type"]), json_type(error["input"])
    if kind_name:
        return f"must be {kind_name}, got {got}."
    if error["type"] == "missing":
        info = field_at(kind, error["loc"])
        return f"is required: {info.description}." if info and info.description else "is required."
    if error["type"] == "literal_error":
        expected = error["ctx"]["expected"].replace("'", '"')  # pydantic quotes the values as Python does
        return f"must be {expected}, got {json.dumps(error['input'])}."
    if error["type"] == "extra_forbidden":
        holder = field_at(kind, error["loc"][:-1])
        return "is not supported by this server" + (f"; it takes {holder.description}." if holder else ".")
    return error["msg"] if error["type"] == OWN_ERROR else f"is not valid: {error['msg']}."


def field_at(kind: type[BaseModel] | None, loc: tuple) -> FieldInfo | None:
    """The declaration of the field at `loc` (array positions skipped), for its description; None if absent.

    >>> field_at(ChatCompletionRequest, ("response_format", "json_schema", "name")).description
    "the schema's name"
    """
    info = None
    for part in loc:
        if isinstance(part, int):
            continue
        fields = {field.alias or name: field for name, field in kind.model_fields.items()} if kind else {}
        info = fields.get(part)
        if info is None:
            return None
        kind = next(
            (
                t
                for t in (info.annotation, *get_args(info.annotation))
                if isinstance(t, type) and issubclass(t, BaseModel)
            ),
            None,
        )
    return info
