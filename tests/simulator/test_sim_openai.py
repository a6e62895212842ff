"""The OpenAI-compatible surface (``/v1``), driven by the real ``openai`` client where it fits."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import openai
import pytest

from simulator import Simulator
from tests.simulator.bodies import LONG_SYSTEM, chat_body, sse_data, sse_json


async def test_non_stream_default_reply(oai: openai.AsyncOpenAI) -> None:
    body = chat_body("hello")
    completion = await oai.chat.completions.create(model="my-model", messages=body["messages"])
    assert completion.object == "chat.completion"
    assert completion.model == "my-model"
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == " ".join(f"tok{i}" for i in range(16))
    assert choice.finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 16
    assert completion.usage.prompt_tokens >= len(LONG_SYSTEM) // 4
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 16
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 0


async def test_stream_without_usage(oai: openai.AsyncOpenAI) -> None:
    stream = await oai.chat.completions.create(model="m", messages=chat_body("hi")["messages"], stream=True)
    chunks = [chunk async for chunk in stream]
    assert all(
        c.object == "chat.completion.chunk" and c.model == "m" and c.id == chunks[0].id for c in chunks
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == " ".join(f"tok{i}" for i in range(16))
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].choices[0].delta.content is None
    assert all(c.usage is None for c in chunks)
    assert len(chunks) == 1 + 16 + 1  # role, one word per chunk, finish


async def test_stream_include_usage_adds_final_chunk(oai: openai.AsyncOpenAI) -> None:
    stream = await oai.chat.completions.create(
        model="m",
        messages=chat_body("hi")["messages"],
        stream=True,
        stream_options={"include_usage": True},
        max_tokens=4,
    )
    chunks = [chunk async for chunk in stream]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None and last.usage.completion_tokens == 4
    assert chunks[-2].choices[0].finish_reason == "length"
    assert sum(1 for c in chunks if c.usage is not None) == 1


async def test_echo_and_reply_and_max_tokens(oai: openai.AsyncOpenAI) -> None:
    messages = chat_body("first question")["messages"]
    messages[-1]["content"] = [{"type": "text", "text": "echo "}, {"type": "text", "text": "this back"}]
    echoed = await oai.chat.completions.create(
        model="m", messages=messages, extra_body={"x_sim": {"echo": True}}
    )
    assert echoed.choices[0].message.content == "echo this back"

    reply = await oai.chat.completions.create(
        model="m", messages=messages, extra_body={"x_sim": {"reply": "exactly  this, please"}}
    )
    assert reply.choices[0].message.content == "exactly  this, please"
    assert reply.choices[0].finish_reason == "stop"

    cut = await oai.chat.completions.create(
        model="m",
        messages=messages,
        max_completion_tokens=2,
        extra_body={"x_sim": {"reply": "one two three"}},
    )
    assert cut.choices[0].message.content == "one two"
    assert cut.choices[0].finish_reason == "length"
    assert cut.usage is not None and cut.usage.completion_tokens == 2

    short = await oai.chat.completions.create(model="m", messages=messages, max_tokens=3)
    assert short.choices[0].message.content == "tok0 tok1 tok2"
    assert short.choices[0].finish_reason == "length"


async def test_stream_chunk_chars(sim: Simulator, http: aiohttp.ClientSession) -> None:
    body = chat_body("x", stream=True, x_sim={"reply": "abcdefghij", "chunk_chars": 4})
    async with http.post(sim.url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        text = await resp.text()
    assert sse_data(text)[-1] == "[DONE]"
    deltas = [c["choices"][0]["delta"].get("content") for c in sse_json(text)]
    assert deltas == ["", "abcd", "efgh", "ij", None]


TOOL_CALLS: list[dict[str, Any]] = [
    {"name": "get_weather", "arguments": {"city": "Lisbon", "unit": "celsius", "days": [1, 2, 3]}},
    {"name": "lookup", "arguments": '{"q": "tollgate"}', "id": "call_fixed"},
]


async def test_tool_calls_non_stream(oai: openai.AsyncOpenAI) -> None:
    completion = await oai.chat.completions.create(
        model="m",
        messages=chat_body("weather?")["messages"],
        extra_body={"x_sim": {"tool_calls": TOOL_CALLS}},
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather", "lookup"]  # type: ignore[union-attr]
    assert json.loads(calls[0].function.arguments) == TOOL_CALLS[0]["arguments"]  # type: ignore[union-attr]
    assert calls[1].id == "call_fixed"
    assert calls[0].id and calls[0].id != calls[1].id


async def test_tool_calls_streamed_reassemble(oai: openai.AsyncOpenAI) -> None:
    stream = await oai.chat.completions.create(
        model="m",
        messages=chat_body("weather?")["messages"],
        stream=True,
        extra_body={"x_sim": {"tool_calls": TOOL_CALLS, "tool_reply": "Let me check."}},
    )
    chunks = [chunk async for chunk in stream]
    calls: dict[int, dict[str, str]] = {}
    content = ""
    fragments = 0
    for chunk in chunks:
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            if tc.id:
                assert tc.type == "function"
                assert tc.function is not None and tc.function.arguments == ""
                call["id"] = tc.id
            if tc.function is not None:
                call["name"] += tc.function.name or ""
                call["arguments"] += tc.function.arguments or ""
                fragments += 1 if tc.function.arguments else 0
    assert content == "Let me check."
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert [calls[i]["name"] for i in sorted(calls)] == ["get_weather", "lookup"]
    assert json.loads(calls[0]["arguments"]) == TOOL_CALLS[0]["arguments"]
    assert json.loads(calls[1]["arguments"]) == {"q": "tollgate"}
    assert calls[1]["id"] == "call_fixed"
    assert fragments > 2  # arguments arrive in 8-character fragments


async def test_embeddings(oai: openai.AsyncOpenAI, sim: Simulator, http: aiohttp.ClientSession) -> None:
    result = await oai.embeddings.create(model="emb", input=["alpha", "beta", "alpha"])  # base64 on the wire
    vectors = [d.embedding for d in result.data]
    assert len(vectors) == 3 and all(len(v) == 8 for v in vectors)
    assert vectors[0] == pytest.approx(vectors[2]) and vectors[0] != pytest.approx(vectors[1])
    assert result.usage.prompt_tokens == result.usage.total_tokens > 0
    async with http.post(sim.url + "/v1/embeddings", json={"model": "emb", "input": "alpha"}) as resp:
        floats = (await resp.json())["data"][0]["embedding"]
    assert floats == pytest.approx(vectors[0], rel=1e-6)


async def test_models_and_health(
    oai: openai.AsyncOpenAI, sim: Simulator, http: aiohttp.ClientSession
) -> None:
    models = [m.id async for m in oai.models.list()]
    assert "sim-model" in models
    async with http.get(sim.url + "/health") as resp:
        assert resp.status == 200
        assert await resp.json() == {"status": "ok"}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"model": "m", "messages": "nope"}', "messages"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "x_sim": {"reply": 3}}', "reply"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}', "max_tokens"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "x_sim": {"fault": {}}}', "fault"),
    ],
)
async def test_bad_input_is_400_in_openai_shape(
    sim: Simulator, http: aiohttp.ClientSession, payload: bytes, message: str
) -> None:
    async with http.post(sim.url + "/v1/chat/completions", data=payload) as resp:
        assert resp.status == 400
        error = (await resp.json())["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert message in error["message"]


async def test_requests_are_recorded(oai: openai.AsyncOpenAI, sim: Simulator) -> None:
    await oai.chat.completions.create(
        model="m", messages=chat_body("hi")["messages"], extra_headers={"X-Custom-Header": "Value"}
    )
    rec = sim.requests[-1]
    assert (rec.replica, rec.method, rec.path, rec.status) == (0, "POST", "/v1/chat/completions", 200)
    assert rec.headers["x-custom-header"] == "Value"
    assert rec.headers["authorization"] == "Bearer unused"
    assert all(name == name.lower() for name in rec.headers)
    assert rec.body["model"] == "m"
    assert not rec.client_disconnected
    sim.clear()
    assert sim.requests == []
