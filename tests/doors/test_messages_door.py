"""The Anthropic Messages door with the real `anthropic` SDK against the gateway and the
simulator: create and stream, tool use across three turns, images, thinking, usage, errors in
Anthropic's envelope, count_tokens and models.retrieve."""

from __future__ import annotations

import base64
import json
from typing import Any

import anthropic
import httpx
import pytest

from simulator import RunningSimulator
from tests.harness import recorded
from tests.servers import OTHER_TENANT_KEY, TEST_KEY, RunningGateway

WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()


def test_create_answers_a_message(
    claude: anthropic.Anthropic, upstream: RunningSimulator, request_id: str
) -> None:
    message = claude.messages.create(
        model="chat",
        max_tokens=64,
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        messages=[{"role": "user", "content": "hello"}],
        metadata={"user_id": "user-7"},
        stop_sequences=["never-said"],
        extra_headers={"x-request-id": request_id},
    )
    assert message.type == "message"
    assert message.role == "assistant"
    assert message.model == "chat"
    assert message.id.startswith("msg_")
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].type == "text"
    assert message.content[0].text.startswith("tok0 tok1")
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 16
    assert message.usage.input_tokens > 0
    [sent] = recorded(upstream, request_id)
    assert sent.body["messages"][0] == {"role": "system", "content": "Be brief.\n\nBe kind."}
    assert sent.body["messages"][1] == {"role": "user", "content": "hello"}
    assert sent.body["max_tokens"] == 64
    assert sent.body["stop"] == ["never-said"]
    assert sent.body["user"] == "user-7"
    assert sent.headers["authorization"] != f"Bearer {TEST_KEY}"  # the client's key never goes upstream


def test_max_tokens_cuts_the_answer_with_max_tokens(
    claude: anthropic.Anthropic, upstream: RunningSimulator
) -> None:
    message = claude.messages.create(model="chat", max_tokens=3, messages=[{"role": "user", "content": "hi"}])
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 3


def test_the_stream_helper_accumulates_the_events(
    claude: anthropic.Anthropic, upstream: RunningSimulator
) -> None:
    with claude.messages.stream(
        model="chat", max_tokens=64, messages=[{"role": "user", "content": "hello"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == final.content[0].text  # type: ignore[union-attr]
    assert text.startswith("tok0 tok1")
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 16
    assert final.usage.input_tokens > 0


def test_the_raw_stream_is_anthropics_event_sequence(
    doors_gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    body = {
        "model": "chat",
        "max_tokens": 64,
        "stream": True,
        "tools": [WEATHER],
        "messages": [{"role": "user", "content": "go"}],
        "x_sim": {
            "tool_reply": "Looking.",
            "tool_calls": [{"id": "toolu_1", "name": "get_weather", "arguments": {"city": "Oslo"}}],
            "chunk_chars": 4,
        },
    }
    with httpx.stream(
        "POST",
        f"{doors_gateway.url}/v1/messages",
        json=body,
        headers={"x-api-key": TEST_KEY, "anthropic-version": "2023-06-01"},
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        raw = response.read().decode()
    events = [block.split("\n") for block in raw.strip().split("\n\n")]
    names = [lines[0].removeprefix("event: ") for lines in events]
    data = [json.loads(lines[1].removeprefix("data: ")) for lines in events]
    assert [d["type"] for d in data] == names
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    starts = [d for d in data if d["type"] == "content_block_start"]
    assert [s["content_block"]["type"] for s in starts] == ["text", "tool_use"]
    assert starts[1]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "get_weather",
        "input": {},
    }
    partial = "".join(
        d["delta"]["partial_json"] for d in data if d.get("delta", {}).get("type") == "input_json_delta"
    )
    assert json.loads(partial) == {"city": "Oslo"}
    assert names.count("content_block_stop") == 2
    delta = data[-2]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] > 0
    assert set(delta["usage"]) >= {"input_tokens", "output_tokens", "cache_read_input_tokens"}


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_tool_use_across_three_turns(
    claude: anthropic.Anthropic, upstream: RunningSimulator, stream: bool
) -> None:
    messages: list[Any] = [{"role": "user", "content": "what is the weather in Oslo?"}]

    def turn() -> Any:
        if stream:
            with claude.messages.stream(model="chat", max_tokens=64, tools=[WEATHER], messages=messages) as s:
                return s.get_final_message()
        return claude.messages.create(model="chat", max_tokens=64, tools=[WEATHER], messages=messages)

    first = turn()
    assert first.stop_reason == "tool_use"
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert call.name == "get_weather"
    assert isinstance(call.input["city"], str)
    messages += [
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C"}],
        },
    ]
    second = turn()
    assert second.stop_reason == "end_turn"
    assert second.content[0].type == "text"
    messages += [
        {"role": "assistant", "content": second.content},
        {"role": "user", "content": "and tomorrow, the weather?"},
    ]
    third = turn()
    assert third.stop_reason == "tool_use"
    assert third.usage.cache_read_input_tokens is not None
    assert third.usage.cache_read_input_tokens > 0  # the simulator's prefix cache saw the earlier turns


def test_a_tool_result_reaches_the_upstream_as_a_tool_message(
    claude: anthropic.Anthropic, upstream: RunningSimulator, request_id: str
) -> None:
    claude.messages.create(
        model="chat",
        max_tokens=16,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        messages=[
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Rome"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_9",
                        "content": [{"type": "text", "text": "rain"}],
                        "is_error": True,
                    },
                    {"type": "text", "text": "thanks"},
                ],
            },
        ],
        extra_headers={"x-request-id": request_id},
    )
    [sent] = recorded(upstream, request_id)
    assert sent.body["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "toolu_9",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_9", "content": "Error: rain"},
        {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
    ]
    assert sent.body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent.body["parallel_tool_calls"] is False
    assert sent.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": WEATHER["description"],
                "parameters": WEATHER["input_schema"],
            },
        }
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [({"type": "any"}, "required"), ({"type": "none"}, "none"), ({"type": "auto"}, "auto")],
)
def test_tool_choice_modes(
    claude: anthropic.Anthropic, upstream: RunningSimulator, request_id: str, choice: Any, expected: str
) -> None:
    claude.messages.create(
        model="chat",
        max_tokens=16,
        tools=[WEATHER],
        tool_choice=choice,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-request-id": request_id},
    )
    [sent] = recorded(upstream, request_id)
    assert sent.body["tool_choice"] == expected


def test_images_reach_the_upstream_as_image_parts(
    claude: anthropic.Anthropic, upstream: RunningSimulator, request_id: str
) -> None:
    message = claude.messages.create(
        model="chat",
        max_tokens=16,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
                    {"type": "image", "source": {"type": "url", "url": "https://images.example.com/cat.png"}},
                    {"type": "text", "text": "what are these?"},
                ],
            }
        ],
        extra_headers={"x-request-id": request_id},
    )
    assert message.stop_reason == "end_turn"
    [sent] = recorded(upstream, request_id)
    assert sent.body["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
        {"type": "image_url", "image_url": {"url": "https://images.example.com/cat.png"}},
        {"type": "text", "text": "what are these?"},
    ]
    assert message.usage.input_tokens > 765  # the simulator counts each image


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_thinking_blocks_only_when_asked(claude: anthropic.Anthropic, stream: bool) -> None:
    def ask(**extra: Any) -> Any:
        if stream:
            with claude.messages.stream(
                model="kimi", max_tokens=256, messages=[{"role": "user", "content": "hi"}], **extra
            ) as s:
                return s.get_final_message()
        return claude.messages.create(
            model="kimi", max_tokens=256, messages=[{"role": "user", "content": "hi"}], **extra
        )

    thought = ask(thinking={"type": "enabled", "budget_tokens": 1024})
    assert [b.type for b in thought.content] == ["thinking", "text"]
    assert thought.content[0].thinking.startswith("think0")  # type: ignore[union-attr]
    plain = ask()
    assert [b.type for b in plain.content] == ["text"]


def test_bearer_authorization_works_as_claude_code_sends_it(
    doors_gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    with anthropic.Anthropic(
        base_url=doors_gateway.url, auth_token=TEST_KEY, api_key=None, max_retries=0
    ) as client:
        message = client.messages.create(
            model="chat", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    assert message.stop_reason == "max_tokens"


def test_errors_take_anthropics_envelope(doors_gateway: RunningGateway, upstream: RunningSimulator) -> None:
    with (
        anthropic.Anthropic(base_url=doors_gateway.url, api_key="tg-wrong", max_retries=0) as client,
        pytest.raises(anthropic.AuthenticationError) as caught,
    ):
        client.messages.create(model="chat", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "Incorrect API key provided."},
    }
    url = f"{doors_gateway.url}/v1/messages"
    key = {"x-api-key": TEST_KEY}
    cases = [
        (httpx.post(url, content=b"{not json", headers=key), 400, "invalid_request_error"),
        (
            httpx.post(
                url, json={"model": "chat", "messages": [{"role": "user", "content": "x"}]}, headers=key
            ),
            400,
            "invalid_request_error",
        ),
        (
            httpx.post(
                url,
                json={"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
                headers=key,
            ),
            404,
            "not_found_error",
        ),
        (
            httpx.post(
                url,
                json={"model": "dead", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
                headers=key,
            ),
            529,
            "overloaded_error",
        ),
        (httpx.get(url, headers=key), 405, "invalid_request_error"),
        (httpx.post(url, json={}), 401, "authentication_error"),
    ]
    for response, status, kind in cases:
        assert response.status_code == status, response.text
        body = response.json()
        assert body["type"] == "error"
        assert body["error"]["type"] == kind
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]


def test_the_other_tenants_models_are_not_found(doors_gateway: RunningGateway) -> None:
    with (
        anthropic.Anthropic(base_url=doors_gateway.url, api_key=OTHER_TENANT_KEY, max_retries=0) as client,
        pytest.raises(anthropic.NotFoundError),
    ):
        client.messages.create(model="kimi", max_tokens=8, messages=[{"role": "user", "content": "hi"}])


def test_server_tools_are_refused_naming_them(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(
            model="chat",
            max_tokens=8,
            messages=[{"role": "user", "content": "hi"}],
            tools=[WEATHER, {"type": "web_search_20250305", "name": "web_search"}],
        )
    assert "web_search_20250305" in caught.value.message


def test_count_tokens_and_models_retrieve(claude: anthropic.Anthropic, doors_gateway: RunningGateway) -> None:
    short = claude.messages.count_tokens(model="chat", messages=[{"role": "user", "content": "hi"}])
    longer = claude.messages.count_tokens(
        model="chat", messages=[{"role": "user", "content": "hi " * 200}], tools=[WEATHER]
    )
    assert 0 < short.input_tokens < longer.input_tokens
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.count_tokens(model="nope", messages=[{"role": "user", "content": "hi"}])
    model = claude.models.retrieve("chat")
    assert model.id == "chat"
    assert model.type == "model"
    with pytest.raises(anthropic.NotFoundError):
        claude.models.retrieve("nope")
    with (
        anthropic.Anthropic(base_url=doors_gateway.url, api_key=OTHER_TENANT_KEY, max_retries=0) as other,
        pytest.raises(anthropic.NotFoundError),
    ):
        other.models.retrieve("kimi")  # beta may use "chat" only


def test_models_list_in_each_format(claude: anthropic.Anthropic, doors_gateway: RunningGateway) -> None:
    listed = list(claude.models.list())
    assert [(m.id, m.type) for m in listed] == [
        ("chat", "model"),
        ("kimi", "model"),
        ("dead", "model"),
        ("dead-first", "model"),
    ]
    with httpx.Client(base_url=doors_gateway.url) as http:
        by_x_api_key = http.get(
            "/v1/models", headers={"x-api-key": TEST_KEY, "anthropic-version": "2023-06-01"}
        )
        openai_format = http.get("/v1/models", headers={"authorization": f"Bearer {TEST_KEY}"})
        unknown_key = http.get(
            "/v1/models", headers={"x-api-key": "tg-wrong", "anthropic-version": "2023-06-01"}
        )
    assert by_x_api_key.json()["first_id"] == "chat"
    assert by_x_api_key.json()["has_more"] is False
    assert openai_format.json()["object"] == "list"
    assert openai_format.json()["data"][0] == {
        "id": "chat",
        "object": "model",
        "created": 0,
        "owned_by": "tollgate",
    }
    assert unknown_key.status_code == 401
    assert unknown_key.json()["error"]["type"] == "authentication_error"
