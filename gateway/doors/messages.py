"""The Anthropic Messages door (`POST /v1/messages`), for the `anthropic` SDK and Claude Code.

The request becomes a chat body (`messages_request.py`); the guarded chat answer becomes a
Message (here) or Anthropic's stream events (`messages_stream.py`); errors take Anthropic's
envelope and status conventions. A Tollgate key is accepted in `x-api-key` or in
`Authorization: Bearer`; `anthropic-version` and `anthropic-beta` are accepted and not needed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.doors.base import StreamEncoder
from gateway.doors.messages_request import chat_body
from gateway.errors import GatewayError, UpstreamUnavailable
from gateway.exchange import Endpoint, Exchange, Usage
from gateway.random_ids import random_hex

PATH = "/v1/messages"
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
OVERLOADED_STATUS = 529  # Anthropic's status for "overloaded": no capacity now, retry later
_CAPACITY_CODES = frozenset({"upstream_unavailable", "shutting_down", "starting"})
_BY_STATUS = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    504: "timeout_error",
}


@dataclass(frozen=True, slots=True)
class MessagesState:
    message_id: str
    thinking: bool  # the client asked for thinking blocks
    stop_sequences: tuple[str, ...]


class MessagesDoor:
    api = "messages"
    path = PATH
    endpoint = Endpoint.CHAT
    job_prefix = "msg"  # an async job's id is the id of the Message it answers
    _encoder: Callable[[Exchange], StreamEncoder] | None = None  # the stream encoder's class

    def credential(self, headers: Mapping[str, str]) -> str | None:
        authorization = headers.get("authorization")
        if authorization:
            return authorization
        key = headers.get("x-api-key")
        return f"Bearer {key}" if key else None

    async def request(self, body: dict[str, Any], exchange: Exchange) -> dict[str, Any]:
        chat = chat_body(body)
        exchange.door_state = MessagesState(
            message_id=exchange.job_id or f"msg_{random_hex(12)}",
            thinking="reasoning_effort" in chat,  # set from `thinking` alone, when it is on
            stop_sequences=tuple(chat.get("stop", ())),
        )
        return chat

    async def response(self, exchange: Exchange, body: dict[str, Any]) -> bytes:
        return orjson.dumps(message(exchange, body))

    def stream(self, exchange: Exchange) -> StreamEncoder:
        encoder = self._encoder
        if encoder is None:  # imported once, not per stream: it imports this module's helpers
            from gateway.doors.messages_stream import MessagesStream

            encoder = self._encoder = MessagesStream
        return encoder(exchange)

    def error(self, error: GatewayError) -> tuple[int, bytes]:
        return anthropic_error(error)

    def job_state(self, exchange: Exchange) -> dict[str, Any] | None:
        state: MessagesState = exchange.door_state
        return {"thinking": state.thinking}  # the stop sequences are in the stored body

    def resume(self, exchange: Exchange, state: dict[str, Any] | None) -> None:
        stop = exchange.body.get("stop")
        exchange.door_state = MessagesState(
            message_id=exchange.request_id,
            thinking=bool(state and state.get("thinking")),
            stop_sequences=tuple(stop) if isinstance(stop, list) else (),
        )


def message(exchange: Exchange, body: dict[str, Any]) -> dict[str, Any]:
    state: MessagesState = exchange.door_state
    choices = body.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    said = choice.get("message")
    said = said if isinstance(said, dict) else {}
    content: list[dict[str, Any]] = []
    reasoning = said.get("reasoning_content") or said.get("reasoning")
    if state.thinking and isinstance(reasoning, str) and reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    for field in ("content", "refusal"):
        value = said.get(field)
        if isinstance(value, str) and value:
            content.append({"type": "text", "text": value})
    for call in said.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            content.append(
                {
                    "type": "tool_use",
                    "id": call.get("id") or f"toolu_{random_hex(12)}",
                    "name": function.get("name") or "",
                    "input": tool_input(function.get("arguments")),
                }
            )
    reason, sequence = stop_reason(choice, state)
    return {
        "id": state.message_id,
        "type": "message",
        "role": "assistant",
        "model": exchange.model_alias,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage(exchange.usage),
    }


def stop_reason(choice: Mapping[str, Any], state: MessagesState) -> tuple[str, str | None]:
    """Anthropic's stop reason for a chat choice, and the stop sequence when the upstream named
    which one matched (vLLM's `stop_reason`)."""
    matched = choice.get("stop_reason")
    if isinstance(matched, str) and matched in state.stop_sequences:
        return "stop_sequence", matched
    finish = choice.get("finish_reason")
    return STOP_REASONS.get(finish, "end_turn") if isinstance(finish, str) else "end_turn", None


def tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as the object Anthropic's `input` is; text that is not a JSON
    object is kept under "arguments" rather than lost."""
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def usage(counted: Usage) -> dict[str, int]:
    """Anthropic counts input tokens served from the cache apart from the others."""
    cached = min(counted.cached_tokens, counted.prompt_tokens)
    return {
        "input_tokens": counted.prompt_tokens - cached,
        "output_tokens": counted.completion_tokens,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }


def anthropic_error(error: GatewayError) -> tuple[int, bytes]:
    status, kind = error_kind(error)
    return status, orjson.dumps(error_body(kind, error.message))


def error_body(kind: str, text: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": text}}


def error_kind(error: GatewayError) -> tuple[int, str]:
    """Anthropic's status and error type for a gateway error (docs/api-compat.md, "Errors")."""
    status = error.status
    if status == 429:  # the gateway's limits and budgets, and upstreams that rate limit it
        return 429, "rate_limit_error"
    if isinstance(error, UpstreamUnavailable) or error.code in _CAPACITY_CODES:
        return OVERLOADED_STATUS, "overloaded_error"
    kind = _BY_STATUS.get(status)
    if kind is not None:
        return status, kind
    return status, "invalid_request_error" if 400 <= status < 500 else "api_error"
