"""Chat completions and embeddings through the gateway with the real openai client, and what
happens to a stream when the upstream or the client fails part-way."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from simulator import RunningSimulator
from tests.harness import HELLO, chat_body, eventually, recorded
from tests.servers import TEST_KEY, RunningGateway

ARGUMENTS = '{"city": "Paris", "days": [1, 2, 3], "note": "a \\"quoted\\" word"}'
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
TOOL_CALLS = [
    {"id": "call_weather", "name": "get_weather", "arguments": ARGUMENTS},
    {"name": "get_time", "arguments": {"tz": "UTC"}},
]


def _reassemble(chunks: list[Any]) -> tuple[dict[int, dict[str, str]], list[str]]:
    """Tool calls rebuilt from streamed deltas, by index, and the finish reasons seen."""
    calls: dict[int, dict[str, str]] = {}
    finish: list[str] = []
    for chunk in chunks:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or ():
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
            if choice.finish_reason:
                finish.append(choice.finish_reason)
    return calls, finish


def test_chat_sync(client: openai.OpenAI, upstream: RunningSimulator) -> None:
    response = client.chat.completions.create(
        model="chat", messages=HELLO, extra_body={"x_sim": {"reply": "Hello there, friend."}}
    )
    assert response.choices[0].message.content == "Hello there, friend."
    assert response.choices[0].finish_reason == "stop"
    assert response.model == "sim-model"
    assert response.usage is not None
    assert response.usage.completion_tokens == 3


def test_chat_stream_sync(client: openai.OpenAI, upstream: RunningSimulator) -> None:
    stream = client.chat.completions.create(
        model="chat", messages=HELLO, stream=True, extra_body={"x_sim": {"reply": "one two three four"}}
    )
    chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    # Relayed chunk by chunk, one word each, as the upstream sent them.
    assert pieces == ["one", " two", " three", " four"]
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert {c.model for c in chunks} == {"sim-model"}


async def test_chat_async(aclient: openai.AsyncOpenAI, upstream: RunningSimulator) -> None:
    response = await aclient.chat.completions.create(
        model="chat", messages=HELLO, extra_body={"x_sim": {"echo": True}}
    )
    assert response.choices[0].message.content == "hello"


async def test_chat_stream_async(aclient: openai.AsyncOpenAI, upstream: RunningSimulator) -> None:
    stream = await aclient.chat.completions.create(
        model="chat", messages=HELLO, stream=True, extra_body={"x_sim": {"reply": "alpha beta gamma"}}
    )
    text = ""
    finish = []
    async for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            if choice.finish_reason:
                finish.append(choice.finish_reason)
    assert text == "alpha beta gamma"
    assert finish == ["stop"]


def test_tool_calls(client: openai.OpenAI, upstream: RunningSimulator) -> None:
    response = client.chat.completions.create(
        model="chat", messages=HELLO, tools=TOOLS, extra_body={"x_sim": {"tool_calls": TOOL_CALLS}}
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    assert calls[0].id == "call_weather"
    assert calls[1].id.startswith("call_")
    assert calls[0].function.arguments == ARGUMENTS
    assert json.loads(calls[1].function.arguments) == {"tz": "UTC"}


def test_streamed_tool_call_deltas_reassemble(client: openai.OpenAI, upstream: RunningSimulator) -> None:
    stream = client.chat.completions.create(
        model="chat",
        messages=HELLO,
        tools=TOOLS,
        stream=True,
        extra_body={"x_sim": {"tool_calls": TOOL_CALLS, "chunk_chars": 5}},
    )
    chunks = list(stream)
    calls, finish = _reassemble(chunks)
    assert calls[0] == {"id": "call_weather", "name": "get_weather", "arguments": ARGUMENTS}
    assert calls[1]["name"] == "get_time"
    assert json.loads(calls[1]["arguments"]) == {"tz": "UTC"}
    assert finish == ["tool_calls"]
    argument_deltas = sum(
        1 for c in chunks for ch in c.choices for d in ch.delta.tool_calls or () if d.function.arguments
    )
    assert argument_deltas >= len(ARGUMENTS) // 5  # really streamed in pieces


async def test_streamed_tool_call_deltas_reassemble_async(
    aclient: openai.AsyncOpenAI, upstream: RunningSimulator
) -> None:
    stream = await aclient.chat.completions.create(
        model="chat",
        messages=HELLO,
        tools=TOOLS,
        stream=True,
        extra_body={"x_sim": {"tool_calls": TOOL_CALLS[:1], "chunk_chars": 3}},
    )
    calls, finish = _reassemble([chunk async for chunk in stream])
    assert calls == {0: {"id": "call_weather", "name": "get_weather", "arguments": ARGUMENTS}}
    assert finish == ["tool_calls"]


def test_embeddings(client: openai.OpenAI, upstream: RunningSimulator) -> None:
    response = client.embeddings.create(model="embed", input=["first text", "second text", "first text"])
    assert response.model == "@cf/baai/bge-large-en-v1.5"
    assert [d.index for d in response.data] == [0, 1, 2]
    vectors = [d.embedding for d in response.data]
    assert [len(v) for v in vectors] == [8, 8, 8]
    assert vectors[0] == vectors[2]
    assert vectors[0] != vectors[1]
    assert response.usage.prompt_tokens > 0


async def test_embeddings_async(aclient: openai.AsyncOpenAI, upstream: RunningSimulator) -> None:
    response = await aclient.embeddings.create(model="embed", input="just one", encoding_format="float")
    assert len(response.data) == 1
    assert len(response.data[0].embedding) == 8


# A stream that fails after it started.


def test_malformed_chunk_becomes_an_error_event(http: httpx.Client, upstream: RunningSimulator) -> None:
    body = chat_body(stream=True, x_sim={"fault": {"kind": "malformed_chunk", "after_chunks": 2}})
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    events = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert len(events) == 3  # two good chunks, then the error and no [DONE]
    assert [json.loads(e)["object"] for e in events[:2]] == ["chat.completion.chunk"] * 2
    error = json.loads(events[2])["error"]
    assert error["code"] == "upstream_malformed_chunk"
    assert error["type"] == "api_error"


def test_malformed_chunk_raises_in_openai_client(client: openai.OpenAI, upstream: RunningSimulator) -> None:
    stream = client.chat.completions.create(
        model="chat",
        messages=HELLO,
        stream=True,
        extra_body={"x_sim": {"fault": {"kind": "malformed_chunk", "after_chunks": 2}}},
    )
    received = []
    with pytest.raises(openai.APIError) as caught:
        received.extend(stream)
    assert len(received) == 2
    assert caught.value.code == "upstream_malformed_chunk"


async def test_upstream_disconnect_mid_stream_raises(
    aclient: openai.AsyncOpenAI, upstream: RunningSimulator, request_id: str
) -> None:
    stream = await aclient.chat.completions.create(
        model="chat",
        messages=HELLO,
        stream=True,
        extra_body={"x_sim": {"reply": "a b c d e f", "fault": {"kind": "disconnect", "after_chunks": 3}}},
        extra_headers={"x-request-id": request_id},
    )
    received = []
    with pytest.raises(openai.APIError) as caught:
        async for chunk in stream:
            received.append(chunk)
    assert not isinstance(caught.value, openai.APIStatusError)
    assert caught.value.code == "upstream_incomplete"
    assert "".join(c.choices[0].delta.content or "" for c in received) == "a b"
    assert len(recorded(upstream, request_id)) == 1


def test_client_disconnect_mid_stream_reaches_the_upstream(
    gateway: RunningGateway, paced_sim: RunningSimulator, request_id: str
) -> None:
    words = " ".join(f"w{i}" for i in range(200))  # 10 s of generation at 50 ms a token
    body = chat_body("paced", stream=True, x_sim={"reply": words})
    headers = {"authorization": f"Bearer {TEST_KEY}", "x-request-id": request_id}
    events = []
    with (
        httpx.Client(base_url=gateway.url, timeout=10) as raw,
        raw.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line)
            if len(events) == 2:
                break
    assert eventually(lambda: any(r.client_disconnected for r in recorded(paced_sim, request_id)), 3.0)
    [attempt] = recorded(paced_sim, request_id)
    assert attempt.client_disconnected
