"""Reading what a client sent: the body as one JSON object, then each field with its type checked.

Every refusal is a `ClientError` naming the field and what is allowed, so a client sees 400 (413 for a
body over the limit) with a message it can act on, never a 500.

    >>> body = await read_json_object(request, max_bytes=1_000_000)
    >>> take(body, "stream", BOOLEAN, default=True)
    True
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request

from labkit.serving.http.errors import ClientError


@dataclass(frozen=True)
class Kind:
    """A JSON type a field may have: its test and its name in messages."""

    name: str  # e.g. "a number"
    test: Callable[[object], bool]


def _real_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


STRING = Kind("a string", lambda v: isinstance(v, str))
BOOLEAN = Kind("true or false", lambda v: isinstance(v, bool))
INTEGER = Kind("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool))
NUMBER = Kind("a number", _real_number)
OBJECT = Kind("a JSON object", lambda v: isinstance(v, dict))
ARRAY = Kind("an array", lambda v: isinstance(v, list))
STRINGS = Kind("a string or an array of strings",
               lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(s, str) for s in v)))


def json_type(value: object) -> str:
    """The JSON name of a value's type, for messages: 'a string', 'null', 'an array', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    for kind in (STRING, INTEGER, NUMBER, OBJECT, ARRAY):
        if kind.test(value):
            return kind.name
    return type(value).__name__


def _refuse_constant(name: str) -> float:
    raise ClientError(400, f"The body is not valid JSON: {name} is not a JSON number.")


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The raw body, or a 413 as soon as it is known to exceed max_bytes (header or bytes received)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise ClientError(413, f"The request body has {declared} bytes; this server accepts at most {max_bytes}.")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise ClientError(413, f"The request body is over {max_bytes} bytes, the most this server accepts.")
    return bytes(body)


async def read_json_object(request: Request, max_bytes: int) -> dict:
    """The body parsed as one JSON object (400 if it is missing, not JSON, or not an object).

        >>> await read_json_object(request, 1_000_000)
        {'model': 'smollm2-135m', 'prompt': 'Hi'}
    """
    raw = await read_body(request, max_bytes)
    if not raw.strip():
        raise ClientError(400, "missing request body: send a JSON object such as {\"model\": ..., ...}.")
    try:
        body = json.loads(raw, parse_constant=_refuse_constant)
    except UnicodeDecodeError:
        raise ClientError(400, "The body is not valid JSON: it is not UTF-8 text.") from None
    except json.JSONDecodeError as error:
        raise ClientError(400, f"The body is not valid JSON: {error.msg} at line {error.lineno} column "
                               f"{error.colno}.") from None
    if not isinstance(body, dict):
        raise ClientError(400, f"The body must be a JSON object, got {json_type(body)}.")
    return body


def take(body: dict, name: str, kind: Kind, default: object = None, required: bool = False,
         where: str = "") -> object:
    """body[name] if present and of the right kind, else default; a 400 naming the field otherwise.

    A null value counts as absent. `where` prefixes the name in messages (e.g. "options.").

        >>> take({"stream": "yes"}, "stream", BOOLEAN)
        ClientError: 'stream' must be true or false, got a string.
    """
    value = body.get(name)
    if value is None:
        if required:
            raise ClientError(400, f"'{where}{name}' is required and must be {kind.name}.", where + name)
        return default
    if not kind.test(value):
        raise ClientError(400, f"'{where}{name}' must be {kind.name}, got {json_type(value)}.", where + name)
    return value


def refuse_unsupported(body: dict, names: dict[str, str], where: str = "") -> None:
    """A 400 for the first field whose value asks for something this server does not do.

    names: field -> what to say; a field counts as asking when its value is truthy (e.g. a non-empty
    `tools` list, `think: true`), so clients that always send the empty default still work.
    """
    for name, reason in names.items():
        if body.get(name):
            raise ClientError(400, f"'{where}{name}' is not supported by this server: {reason}", where + name)
