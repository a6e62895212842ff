"""Error responses in the two wire formats the simulator speaks."""

from __future__ import annotations

import enum
from http import HTTPStatus

import orjson
from aiohttp import web

# Internal codes used when a fault or an error does not name one. 3003, 3006, 3007, 3040 and
# 3042 are documented Workers AI codes (platform/errors); 10000 is the Cloudflare API's
# "Authentication error"; 3043 for 5xx is a simulator choice, not a documented code.
_WORKERS_AI_CODES = {400: 3003, 401: 10000, 404: 3042, 408: 3007, 413: 3006, 429: 3040}
_WORKERS_AI_SERVER_ERROR = 3043
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
_OPENAI_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}


class ErrorFormat(enum.Enum):
    OPENAI = "openai"  # {"error": {"message", "type", "param", "code"}}
    # {"result": null, "success": false, "errors": [{"code", "message"}], "messages": []}
    WORKERS_AI = "workers_ai"


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def error_body(
    fmt: ErrorFormat,
    status: int,
    message: str | None = None,
    code: int | None = None,
    param: str | None = None,
    code_text: str | None = None,
) -> bytes:
    """The JSON error document for ``status``; ``code`` is the Workers AI internal code,
    ``param`` and ``code_text`` the OpenAI error's ``param`` and ``code``."""
    text = message or _phrase(status)
    if fmt is ErrorFormat.WORKERS_AI:
        if code is None:
            code = _WORKERS_AI_CODES.get(status, _WORKERS_AI_SERVER_ERROR if status >= 500 else status * 10)
        return orjson.dumps(
            {"result": None, "success": False, "errors": [{"code": code, "message": text}], "messages": []}
        )
    error_type = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    if code_text is None:
        code_text = str(code) if code is not None else _OPENAI_CODES.get(status)
    return orjson.dumps({"error": {"message": text, "type": error_type, "param": param, "code": code_text}})


def format_retry_after(seconds: float) -> str:
    """``Retry-After`` value: whole seconds when integral, else the decimal the test asked for."""
    return str(int(seconds)) if seconds == int(seconds) else repr(seconds)


def error_response(
    fmt: ErrorFormat,
    status: int,
    message: str | None = None,
    code: int | None = None,
    retry_after: float | None = None,
    param: str | None = None,
    code_text: str | None = None,
) -> web.Response:
    headers = {"Retry-After": format_retry_after(retry_after)} if retry_after is not None else None
    return web.Response(
        status=status,
        body=error_body(fmt, status, message, code, param, code_text),
        content_type="application/json",
        headers=headers,
    )
