"""Body checks: every malformed request is a 400 in OpenAI's format naming the parameter,
and bodies the gateway does not need to understand pass."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import orjson
import pytest

from gateway.errors import InvalidRequest
from gateway.exchange import Endpoint
from gateway.validation import parse_json_object, validate
from simulator import RunningSimulator
from tests.harness import HELLO, openai_error

CHAT = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"", "empty_body"),
        (b"  \n", "empty_body"),
        (b"{not json", "invalid_json"),
        (b'{"model": "chat",', "invalid_json"),
        (b"[1, 2]", "invalid_json"),
        (b'"a string"', "invalid_json"),
        (b'{"model": "\xff"}', "invalid_json"),
        (b'{"model": "chat"} {"model": "chat"}', "invalid_json"),
        (b'{"model": "chat", "temperature": NaN}', "invalid_json"),
    ],
)
def test_unparseable_body_is_400(
    http: httpx.Client, upstream: RunningSimulator, raw: bytes, code: str
) -> None:
    error = openai_error(http.post(CHAT, content=raw), 400)
    assert error["code"] == code
    assert error["type"] == "invalid_request_error"
    assert error["param"] is None
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"messages": HELLO}, "model", "missing_required_parameter"),
        ({"model": 5, "messages": HELLO}, "model", "invalid_value"),
        ({"model": "", "messages": HELLO}, "model", "invalid_value"),
        ({"model": "chat"}, "messages", "missing_required_parameter"),
        ({"model": "chat", "messages": "hello"}, "messages", "invalid_value"),
        ({"model": "chat", "messages": []}, "messages", "invalid_value"),
        ({"model": "chat", "messages": ["hello"]}, "messages[0]", "invalid_value"),
        ({"model": "chat", "messages": [{"content": "x"}]}, "messages[0].role", "missing_required_parameter"),
        ({"model": "chat", "messages": [*HELLO, {"role": 1}]}, "messages[1].role", "invalid_value"),
        (
            {"model": "chat", "messages": [{"role": "robot", "content": "x"}]},
            "messages[0].role",
            "invalid_value",
        ),
        (
            {"model": "chat", "messages": [{"role": "user", "content": 7}]},
            "messages[0].content",
            "invalid_value",
        ),
        ({"model": "chat", "messages": HELLO, "stream": "yes"}, "stream", "invalid_value"),
        (
            {"model": "chat", "messages": HELLO, "stream_options": {"include_usage": True}},
            "stream_options",
            "invalid_value",
        ),
        (
            {"model": "chat", "messages": HELLO, "stream": True, "stream_options": {"include_usage": "yes"}},
            "stream_options.include_usage",
            "invalid_value",
        ),
        ({"model": "chat", "messages": HELLO, "max_tokens": 0}, "max_tokens", "invalid_value"),
        ({"model": "chat", "messages": HELLO, "max_tokens": True}, "max_tokens", "invalid_value"),
        (
            {"model": "chat", "messages": HELLO, "max_completion_tokens": 1.5},
            "max_completion_tokens",
            "invalid_value",
        ),
        ({"model": "chat", "messages": HELLO, "n": -1}, "n", "invalid_value"),
        ({"model": "chat", "messages": HELLO, "tools": {"type": "function"}}, "tools", "invalid_value"),
        ({"model": "chat", "messages": HELLO, "tools": [{"function": {}}]}, "tools[0]", "invalid_value"),
        ({"model": "chat", "messages": HELLO, "tool_choice": 3}, "tool_choice", "invalid_value"),
    ],
)
def test_invalid_chat_body_names_the_param(
    http: httpx.Client, upstream: RunningSimulator, body: dict[str, Any], param: str, code: str
) -> None:
    error = openai_error(http.post(CHAT, json=body), 400)
    assert error["param"] == param
    assert error["code"] == code
    assert error["type"] == "invalid_request_error"
    assert param in error["message"]
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"input": "x"}, "model", "missing_required_parameter"),
        ({"model": "embed"}, "input", "missing_required_parameter"),
        ({"model": "embed", "input": 5}, "input", "invalid_value"),
        ({"model": "embed", "input": []}, "input", "invalid_value"),
        ({"model": "embed", "input": ["a", 1]}, "input", "invalid_value"),
        ({"model": "embed", "input": [[1, 2], ["a"]]}, "input", "invalid_value"),
    ],
)
def test_invalid_embeddings_body_names_the_param(
    http: httpx.Client, body: dict[str, Any], param: str, code: str
) -> None:
    error = openai_error(http.post(EMBEDDINGS, json=body), 400)
    assert (error["param"], error["code"]) == (param, code)


def test_openai_client_raises_bad_request(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="chat", messages=HELLO, max_tokens=0)
    assert caught.value.status_code == 400
    assert caught.value.param == "max_tokens"
    assert caught.value.code == "invalid_value"


# The functions themselves.


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
        {"model": "m", "messages": [{"role": "assistant", "content": None, "tool_calls": []}]},
        {"model": "m", "messages": HELLO, "stream": True, "stream_options": {"include_usage": True}},
        {
            "model": "m",
            "messages": HELLO,
            "tools": [{"type": "function"}],
            "tool_choice": {"type": "function"},
        },
        {"model": "m", "messages": HELLO, "max_tokens": 1, "n": 2, "vendor_field": {"anything": [1]}},
    ],
)
def test_valid_chat_bodies_pass(body: dict[str, Any]) -> None:
    validate(Endpoint.CHAT, body)


@pytest.mark.parametrize("value", ["text", ["a", "b"], [1, 2, 3], [[1, 2], [3]]])
def test_valid_embeddings_inputs_pass(value: object) -> None:
    validate(Endpoint.EMBEDDINGS, {"model": "m", "input": value})


def test_parse_json_object_returns_the_object() -> None:
    body = {"model": "m", "nested": {"a": [1, None, True]}}
    assert parse_json_object(orjson.dumps(body)) == body


def test_parse_json_object_says_where_the_json_breaks() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_json_object(b'{"model": }')
    assert caught.value.status == 400
    assert caught.value.code == "invalid_json"
    assert "position 10" in caught.value.message
