"""Fuzzed bodies for the Responses and Messages doors: whatever arrives, the answer is never a
5xx, and an error always comes in the door's own envelope."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.servers import TEST_KEY, RunningGateway

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 70) | st.floats(-1e6, 1e6) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
TEXT = st.text(max_size=24)
MODEL = st.sampled_from(["chat", "chat", "chat", "chat", "kimi", "nope", ""])


def _either(structured: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly well-shaped values, sometimes anything at all."""
    return st.integers(0, 11).flatmap(lambda pick: JSON if pick == 0 else structured)


ANTHROPIC_BLOCK = st.fixed_dictionaries(
    {"type": _either(st.sampled_from(["text", "image", "tool_use", "tool_result", "thinking", "document"]))},
    optional={
        "text": _either(TEXT),
        "source": _either(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["base64", "url", "file"])},
                optional={
                    "media_type": _either(st.just("image/png")),
                    "data": TEXT,
                    "url": _either(st.just("https://images.example.com/a.png")),
                },
            )
        ),
        "id": _either(TEXT),
        "name": _either(st.sampled_from(["get_weather", "search"])),
        "input": JSON,
        "tool_use_id": _either(TEXT),
        "content": _either(TEXT),
        "is_error": JSON,
    },
)
ANTHROPIC_MESSAGE = st.fixed_dictionaries(
    {
        "role": _either(st.sampled_from(["user", "assistant"])),
        "content": _either(TEXT | st.lists(ANTHROPIC_BLOCK, max_size=3)),
    }
)
ANTHROPIC_BODY = st.fixed_dictionaries(
    {
        "model": MODEL,
        "max_tokens": _either(st.integers(0, 40)),
        "messages": _either(st.lists(ANTHROPIC_MESSAGE, max_size=3)),
    },
    optional={
        "system": _either(TEXT | st.lists(ANTHROPIC_BLOCK, max_size=2)),
        "tools": _either(
            st.lists(
                st.fixed_dictionaries({"name": _either(TEXT)}, optional={"input_schema": JSON, "type": JSON}),
                max_size=2,
            )
        ),
        "tool_choice": _either(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["auto", "any", "tool", "none", "x"])}, optional={"name": TEXT}
            )
        ),
        "stop_sequences": _either(st.lists(TEXT, max_size=2)),
        "metadata": _either(st.fixed_dictionaries({}, optional={"user_id": JSON})),
        "thinking": _either(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["enabled", "disabled", "adaptive", "x"])},
                optional={"budget_tokens": JSON},
            )
        ),
        "temperature": JSON,
        "stream": JSON,
    },
)
RESPONSES_PART = st.fixed_dictionaries(
    {"type": _either(st.sampled_from(["input_text", "input_image", "output_text", "input_file", "refusal"]))},
    optional={
        "text": _either(TEXT),
        "image_url": _either(st.just("https://images.example.com/a.png")),
        "detail": JSON,
        "file_id": JSON,
    },
)
RESPONSES_ITEM = st.fixed_dictionaries(
    {
        "type": _either(
            st.sampled_from(
                ["message", "function_call", "function_call_output", "reasoning", "item_reference"]
            )
        )
    },
    optional={
        "role": _either(st.sampled_from(["user", "assistant", "system", "developer"])),
        "content": _either(TEXT | st.lists(RESPONSES_PART, max_size=2)),
        "call_id": _either(TEXT),
        "name": _either(TEXT),
        "arguments": _either(TEXT),
        "output": _either(TEXT),
    },
)
RESPONSES_BODY = st.fixed_dictionaries(
    {"model": _either(MODEL), "input": _either(TEXT | st.lists(RESPONSES_ITEM, max_size=3))},
    optional={
        "instructions": JSON,
        "tools": _either(
            st.lists(
                st.fixed_dictionaries(
                    {"type": st.sampled_from(["function", "web_search"]), "name": _either(TEXT)},
                    optional={"parameters": JSON},
                ),
                max_size=2,
            )
        ),
        "tool_choice": JSON | st.sampled_from(["auto", "none", "required"]),
        "text": _either(st.fixed_dictionaries({"format": JSON})),
        "max_output_tokens": _either(st.integers(-1, 40)),
        "reasoning": JSON,
        "previous_response_id": JSON,
        "store": JSON,
        "metadata": JSON,
        "parallel_tool_calls": JSON,
        "stream": JSON,
    },
)
FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def http(doors_gateway: RunningGateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=doors_gateway.url, timeout=30) as client:
        yield client


def _post(http: httpx.Client, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return http.post(path, content=body, headers={"content-type": "application/json", **headers})


def _anthropic_envelope(response: httpx.Response) -> None:
    event(f"status {response.status_code}")
    assert response.status_code < 500 or response.status_code == 529, response.text
    if response.status_code == 200:
        if response.headers["content-type"] == "text/event-stream":
            assert response.text.startswith("event: message_start\n")
        else:
            assert response.json()["type"] == "message"
        return
    body = response.json()
    assert set(body) == {"type", "error"}
    assert body["type"] == "error"
    assert isinstance(body["error"]["type"], str)
    assert isinstance(body["error"]["message"], str)


def _openai_envelope(response: httpx.Response) -> None:
    event(f"status {response.status_code}")
    assert response.status_code < 500, response.text
    if response.status_code == 200:
        if response.headers["content-type"] == "text/event-stream":
            assert response.text.startswith("event: response.created\n")
        else:
            assert response.json()["object"] == "response"
        return
    body = response.json()
    assert list(body) == ["error"]
    assert set(body["error"]) == {"message", "type", "param", "code"}


@FUZZ
@given(body=ANTHROPIC_BODY)
def test_messages_bodies(http: httpx.Client, body: dict[str, Any]) -> None:
    _anthropic_envelope(_post(http, "/v1/messages", orjson.dumps(body), {"x-api-key": TEST_KEY}))


@FUZZ
@given(body=ANTHROPIC_BODY)
def test_count_tokens_bodies(http: httpx.Client, body: dict[str, Any]) -> None:
    response = _post(http, "/v1/messages/count_tokens", orjson.dumps(body), {"x-api-key": TEST_KEY})
    if response.status_code == 200:
        assert isinstance(response.json()["input_tokens"], int)
    else:
        _anthropic_envelope(response)


@FUZZ
@given(body=RESPONSES_BODY)
def test_responses_bodies(http: httpx.Client, body: dict[str, Any]) -> None:
    _openai_envelope(
        _post(http, "/v1/responses", orjson.dumps(body), {"authorization": f"Bearer {TEST_KEY}"})
    )


@FUZZ
@given(raw=st.binary(max_size=64) | JSON.map(orjson.dumps))
def test_any_bytes(http: httpx.Client, raw: bytes) -> None:
    _anthropic_envelope(_post(http, "/v1/messages", raw, {"x-api-key": TEST_KEY}))
    _openai_envelope(_post(http, "/v1/responses", raw, {"authorization": f"Bearer {TEST_KEY}"}))
