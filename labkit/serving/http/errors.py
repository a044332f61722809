"""Client mistakes and overload as each protocol reports them.

One exception, `ClientError`, carries the HTTP status, a message that says what was wrong and what is
allowed, and the field it concerns. `error_response` writes it in the shape of the protocol the path
belongs to:

- Ollama (`/api/*`, `/`): `{"error": "<message>"}`
- OpenAI (`/v1/*`): `{"error": {"message", "type", "param", "code"}}` (vLLM's: code is the HTTP status)

    >>> error_response("/v1/chat/completions", ClientError(404, "The model `x` does not exist.", "model"))
    <JSONResponse 404 {"error": {"message": "The model `x` does not exist.", "type": "NotFoundError", ...}}>
"""

from __future__ import annotations

from starlette.responses import JSONResponse

# OpenAI error types by status, as vLLM names them (the official client reads them as `.type`).
OPENAI_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    413: "RequestTooLargeError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class ClientError(Exception):
    """A request the server refuses, with its HTTP status and the field at fault (if one is).

    >>> raise ClientError(400, "'temperature' must be a number >= 0, got a string.", "temperature")
    """

    def __init__(self, status: int, message: str, param: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.headers = headers or {}


def is_openai_path(path: str) -> bool:
    """True for the OpenAI-compatible routes (`/v1/...`), whose errors take OpenAI's shape."""
    return path == "/v1" or path.startswith("/v1/")


def error_body(path: str, error: ClientError) -> dict:
    """The JSON body of an error in the protocol of `path`.

    >>> error_body("/api/chat", ClientError(404, "model 'x' not found"))
    {'error': "model 'x' not found"}
    """
    if not is_openai_path(path):
        return {"error": error.message}
    kind = OPENAI_TYPES.get(error.status, "BadRequestError" if error.status < 500 else "InternalServerError")
    return {"error": {"message": error.message, "type": kind, "param": error.param, "code": error.status}}


def error_response(path: str, error: ClientError) -> JSONResponse:
    """A JSON response with the error's status and its protocol's shape (see the module doc)."""
    return JSONResponse(error_body(path, error), status_code=error.status, headers=error.headers)
