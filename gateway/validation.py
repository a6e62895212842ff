"""Body checks for the OpenAI endpoints: only what the gateway relies on, so unknown
fields and upstream-specific extensions pass through untouched."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import InvalidRequest
from gateway.exchange import Endpoint

MAX_CHOICES = 128  # OpenAI's own bound on `n`; each choice is reserved as a whole output
_MESSAGE_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def parse_json_object(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        raise InvalidRequest("The request body is empty; expected a JSON object.", code="empty_body")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(
            f"The request body is not valid JSON: {exc.msg} at position {exc.pos}.", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    return body


def validate(endpoint: Endpoint, body: dict[str, Any]) -> None:
    _require_str(body, "model")
    if endpoint is Endpoint.CHAT:
        _validate_chat(body)
    else:
        _validate_embeddings(body)


def _validate_chat(body: dict[str, Any]) -> None:
    messages = body.get("messages")
    if messages is None:
        raise _missing("messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid("messages", "must be a non-empty array of message objects")
    for index, message in enumerate(messages):  # the parameter's name is made only for an error
        if not isinstance(message, dict):
            raise _invalid(f"messages[{index}]", "must be an object")
        role = message.get("role")
        if not isinstance(role, str) or role not in _MESSAGE_ROLES:
            param = f"messages[{index}].role"
            if role is None:
                raise _missing(param)
            if not isinstance(role, str):
                raise _invalid(param, "must be a string")
            raise _invalid(param, f"must be one of {', '.join(sorted(_MESSAGE_ROLES))}")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise _invalid(
                f"messages[{index}].content", "must be a string, an array of content parts or null"
            )
    _optional_type(body, "stream", bool, "a boolean")
    _optional_type(body, "stream_options", dict, "an object")
    options = body.get("stream_options")
    if options is not None:
        if not body.get("stream"):
            raise _invalid("stream_options", "is only allowed when stream is true")
        _optional_type(options, "include_usage", bool, "a boolean", prefix="stream_options.")
    for name in ("max_tokens", "max_completion_tokens", "n"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise _invalid(name, "must be a positive integer")
    n = body.get("n")
    if n is not None and n > MAX_CHOICES:
        raise _invalid("n", f"must be at most {MAX_CHOICES}")
    _optional_type(body, "tools", list, "an array")
    for index, tool in enumerate(body.get("tools") or ()):
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise _invalid(f"tools[{index}]", "must be an object with a type")
    choice = body.get("tool_choice")
    if choice is not None and not isinstance(choice, str | dict):
        raise _invalid("tool_choice", "must be a string or an object")


def _validate_embeddings(body: dict[str, Any]) -> None:
    value = body.get("input")
    if value is None:
        raise _missing("input")
    if isinstance(value, str):
        return
    if not isinstance(value, list) or not value:
        raise _invalid("input", "must be a string or a non-empty array")
    if not (all(isinstance(v, str) for v in value) or all(_is_token_list(v) for v in value)) and not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise _invalid("input", "must be a string, an array of strings or an array of token arrays")


def _is_token_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _require_str(body: dict[str, Any], name: str) -> None:
    value = body.get(name)
    if value is None:
        raise _missing(name)
    if not isinstance(value, str) or not value:
        raise _invalid(name, "must be a non-empty string")


def _optional_type(body: dict[str, Any], name: str, kind: type, what: str, prefix: str = "") -> None:
    value = body.get(name)
    if value is not None and not isinstance(value, kind):
        raise _invalid(prefix + name, f"must be {what}")


def _missing(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def _invalid(param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid value for '{param}': {why}.", param=param, code="invalid_value")
