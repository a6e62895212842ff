"""The doors' tables, unit by unit: requests in, errors out, and which envelope a path's
errors take (docs/api-compat.md)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.doors.messages import MessagesState, anthropic_error, stop_reason, tool_input, usage
from gateway.doors.messages_request import chat_body as messages_chat_body
from gateway.doors.messages_request import thinking_effort
from gateway.doors.registry import build_doors
from gateway.doors.responses_request import chat_body as responses_chat_body
from gateway.doors.responses_request import input_messages
from gateway.errors import (
    AuthenticationFailed,
    GatewayError,
    InternalError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    QuotaExceeded,
    RateLimitExceeded,
    UpstreamError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.exchange import Usage


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (InvalidRequest("x"), 400, "invalid_request_error"),
        (AuthenticationFailed("x"), 401, "authentication_error"),
        (PermissionDenied("x"), 403, "permission_error"),
        (NotFound("x"), 404, "not_found_error"),
        (PayloadTooLarge("x"), 413, "request_too_large"),
        (RateLimitExceeded("x"), 429, "rate_limit_error"),
        (QuotaExceeded("x"), 429, "rate_limit_error"),
        (UpstreamUnavailable("x"), 529, "overloaded_error"),
        (UpstreamTimeout("x"), 504, "timeout_error"),
        (UpstreamRejected("x", status=422), 422, "invalid_request_error"),
        (UpstreamError("x"), 502, "api_error"),
        (InternalError("r1"), 500, "api_error"),
        (GatewayError("The gateway is starting.", code="starting"), 529, "overloaded_error"),
        (UpstreamUnavailable("x", status=429, code="upstream_rate_limited"), 429, "rate_limit_error"),
        (UpstreamRejected("x", status=413), 413, "request_too_large"),
        (PermissionDenied("Denied by policy: no.", code="policy_denied"), 403, "permission_error"),
    ],
)
def test_anthropic_errors(error: GatewayError, status: int, kind: str) -> None:
    got_status, body = anthropic_error(error)
    assert got_status == status
    assert orjson.loads(body) == {"type": "error", "error": {"type": kind, "message": error.message}}


def test_which_envelope_a_paths_errors_take() -> None:
    doors = build_doors(None)
    assert doors.for_errors("/v1/messages", {}).api == "messages"  # type: ignore[union-attr]
    assert doors.for_errors("/v1/messages/count_tokens", {}).api == "messages"  # type: ignore[union-attr]
    assert doors.for_errors("/v1/responses/resp_1", {}).api == "responses"  # type: ignore[union-attr]
    assert doors.for_errors("/v1/models/x", {"anthropic-version": "2023-06-01"}).api == "messages"  # type: ignore[union-attr]
    assert doors.for_errors("/v1/models/x", {}) is None
    assert doors.for_errors("/v1/messagesx", {}) is None


def test_a_messages_request_becomes_a_chat_request() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": 10,
        "system": "sys",
        "messages": [{"role": "user", "content": "hi"}],
        "stop_sequences": ["END"],
        "temperature": 0.2,
        "top_k": 5,
        "metadata": {"user_id": "u1"},
        "thinking": {"type": "enabled", "budget_tokens": 20000},
        "stream": True,
        "x_sim": {"reply": "r"},
        "service_tier": "auto",  # accepted, not forwarded
    }
    assert messages_chat_body(body) == {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
        "stop": ["END"],
        "temperature": 0.2,
        "top_k": 5,
        "user": "u1",
        "reasoning_effort": "high",
        "stream": True,
        "x_sim": {"reply": "r"},
    }


@pytest.mark.parametrize(
    ("thinking", "effort"),
    [
        (None, None),
        ({"type": "disabled"}, None),
        ({"type": "adaptive"}, "medium"),
        ({"type": "enabled"}, "medium"),
        ({"type": "enabled", "budget_tokens": 1024}, "low"),
        ({"type": "enabled", "budget_tokens": 8000}, "medium"),
        ({"type": "enabled", "budget_tokens": 32000}, "high"),
    ],
)
def test_thinking_becomes_a_reasoning_effort(thinking: Any, effort: str | None) -> None:
    assert thinking_effort(thinking) == effort


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"model": "m", "max_tokens": 5, "messages": []}, "messages"),
        ({"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "document"}]}],
            },
            "messages[0].content[0].type",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "mcp_servers": [],
            },
            "mcp_servers",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "bash_20250124", "name": "bash"}],
            },
            "tools",
        ),
    ],
)
def test_messages_requests_refused_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        messages_chat_body(body)
    assert caught.value.param == param


def test_messages_answers() -> None:
    state = MessagesState("msg_1", thinking=False, stop_sequences=("END",))
    assert stop_reason({"finish_reason": "stop", "stop_reason": "END"}, state) == ("stop_sequence", "END")
    assert stop_reason({"finish_reason": "length"}, state) == ("max_tokens", None)
    assert stop_reason({"finish_reason": "tool_calls"}, state) == ("tool_use", None)
    assert stop_reason({"finish_reason": "content_filter"}, state) == ("refusal", None)
    assert tool_input('{"a": 1}') == {"a": 1}
    assert tool_input("not json") == {"arguments": "not json"}
    assert tool_input("[1]") == {"arguments": [1]}
    assert tool_input("") == {}
    assert usage(Usage(prompt_tokens=100, completion_tokens=7, cached_tokens=64)) == {
        "input_tokens": 36,
        "output_tokens": 7,
        "cache_read_input_tokens": 64,
        "cache_creation_input_tokens": 0,
    }


def test_a_responses_request_becomes_a_chat_request() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "instructions": "sys",
        "input": "hi",
        "max_output_tokens": 9,
        "reasoning": {"effort": "low", "summary": "auto"},
        "text": {"format": {"type": "json_object"}},
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}],
        "tool_choice": {
            "type": "allowed_tools",
            "mode": "required",
            "tools": [{"type": "function", "name": "f"}],
        },
        "parallel_tool_calls": True,
        "metadata": {"a": "b"},
        "store": True,
    }
    assert responses_chat_body(body, [{"role": "user", "content": "before"}], input_messages(body)) == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "before"},
            {"role": "user", "content": "hi"},
        ],
        "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": True}}
        ],
        "tool_choice": {
            "type": "allowed_tools",
            "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "f"}}]},
        },
        "parallel_tool_calls": True,
        "response_format": {"type": "json_object"},
        "max_tokens": 9,
        "reasoning_effort": "low",
    }


@pytest.mark.parametrize(
    "extra",
    [{}, {"temperature": 0.5}, {"unknown_field": 1}, {"reasoning": {"effort": "low"}}],
    ids=["usual fields only", "a rare field", "an unknown field", "another rare field"],
)
def test_extensions_pass_through_whatever_else_a_body_has(extra: dict[str, Any]) -> None:
    """A body of usual fields is read on a shorter path: its extensions still go upstream."""
    responses = {"model": "m", "input": "hi", "stream": True, "x_sim": {"reply": "r"}, **extra}
    assert responses_chat_body(responses, [], input_messages(responses))["x_sim"] == {"reply": "r"}
    messages = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], **extra}
    messages["x_sim"] = {"reply": "r"}
    assert messages_chat_body(messages)["x_sim"] == {"reply": "r"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "input"),
        ({"model": "m", "input": []}, "input"),
        ({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_file"}]}]},
            "input[0].content[0].type",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].file_id",
        ),
        ({"model": "m", "input": "x", "tools": [{"type": "computer_use_preview"}]}, "tools"),
        ({"model": "m", "input": "x", "background": "yes"}, "background"),
        ({"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
        ({"model": "m", "input": "x", "reasoning": {"effort": "max"}}, "reasoning.effort"),
        ({"model": "m", "input": [{"type": "message", "role": []}]}, "input[0].role"),  # found by the fuzzer
        ({"model": "m", "input": "x", "reasoning": {"effort": ["low"]}}, "reasoning.effort"),
    ],
)
def test_responses_requests_refused_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        responses_chat_body(body, [], input_messages(body))
    assert caught.value.param == param
