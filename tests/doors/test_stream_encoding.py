"""The doors' stream encoders on awkward text, in process: every event is valid for the
`openai` and `anthropic` SDKs' own event types, the deltas add up to exactly the text that
came in (quotes, backslashes, control characters, line separators, emoji, empty deltas),
and what a stream ends with is what the door answers the same reply non-streamed.

The encoders splice pre-encoded bytes (templates, invariant fields, a delta's head and
tail), so these check the bytes themselves, not only what a client library accepts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from anthropic.types import RawMessageStreamEvent
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.doors.messages import MessagesDoor
from gateway.doors.responses import ResponsesDoor, call_item, usage
from gateway.exchange import Endpoint, Exchange, Principal, Tenant, Usage
from gateway.ports import Chunk

AWKWARD = [
    'say "hi"',
    " back\\slash \\n not a newline",
    "\x00\x01\x1f\x7f controls",
    "tab\tnew\nline\rcr",
    "\u2028\u2029 separators",
    "naïve café ✓ 日本語",
    "emoji 😀🎉",
    "</script><!--",
    '{"json": [1, 2]}',
]
OPENAI_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
ANTHROPIC_EVENT: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "sim-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _call_piece(arguments: str, **call: Any) -> dict[str, Any]:
    return {
        "tool_calls": [
            {
                "index": call.pop("index", 0),
                **call,
                "function": {"arguments": arguments, **call.pop("function", {})},
            }
        ]
    }


def _answer(reasoning: str, text: str, calls: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """A streamed reply: reasoning, text, then tool calls (id, name, arguments), each in
    small pieces, with the empty deltas upstreams send around them."""
    chunks = [_chunk({"role": "assistant", "content": ""})]
    chunks += [_chunk({"reasoning_content": reasoning[i : i + 5]}) for i in range(0, len(reasoning), 5)]
    chunks += [_chunk({"content": text[i : i + 3]}) for i in range(0, len(text), 3)]
    chunks.append(_chunk({}))
    chunks.append(_chunk({"content": ""}))
    for index, (call_id, name, arguments) in enumerate(calls):
        opening = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        chunks.append(_chunk({"tool_calls": [opening]}))
        pieces = [arguments[i : i + 4] for i in range(0, len(arguments), 4)]
        chunks += [_chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}) for p in pieces]
    chunks.append(_chunk({}, "tool_calls" if calls else "stop"))
    return chunks


def _non_streamed(reasoning: str, text: str, calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, name, arguments in calls
        ]
    finish = "tool_calls" if calls else "stop"
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }


def _replies() -> Iterator[tuple[str, str, list[tuple[str, str, str]]]]:
    for text in AWKWARD:
        yield "", text * 3, []
    yield 'think "twice"\n', AWKWARD[0], []
    arguments = json.dumps({"city": 'Os"lo\\', "note": "\u2028😀\x01"}, ensure_ascii=False)
    yield "", "", [("call_1", "get_weather", arguments)]
    yield "", "Looking.", [("call_1", "get_weather", arguments), ("call_2", 'wé"ird', "{}")]


REPLIES = list(_replies())


def _exchange(door: Any, body: dict[str, Any]) -> Exchange:
    exchange = Exchange(
        "req-1", Endpoint.CHAT, 0.0, 1e9, {}, b"", principal=Principal(Tenant("t"), "k"), door=door
    )
    exchange.model_alias = 'chat "alias" ✓'
    exchange.usage = Usage(40, 16, cached_tokens=32, reasoning_tokens=4, reported=True)
    asyncio.run(door.request(body, exchange))
    return exchange


def _events(raw: bytes) -> list[tuple[str, Any]]:
    """(name, data) of each server-sent event; every event is `event:` and one `data:` line."""
    assert raw.endswith(b"\n\n")
    events = []
    for block in raw[:-2].split(b"\n\n"):
        name, data = block.split(b"\n")
        assert name.startswith(b"event: ") and data.startswith(b"data: ")
        events.append((name[7:].decode(), orjson.loads(data[6:])))
    return events


def _stream(door: Any, exchange: Exchange, chunks: list[dict[str, Any]], looked: bool = True) -> bytes:
    """The encoder's bytes for `chunks`; `looked`: each chunk looked at first, as the pipeline's
    first guard (the produced-text count) looks at every chunk (`Chunk.text_delta`, kept)."""
    encoder = door.stream(exchange)
    out = []
    for data in chunks:
        chunk = Chunk(orjson.dumps(data), data)
        if looked:
            chunk.text_delta()
        out.append(encoder.chunk(chunk))
    out.append(asyncio.run(encoder.done()))
    return b"".join(out)


def _without_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "id"} for item in items]


@pytest.mark.parametrize("looked", [True, False], ids=["looked", "fresh"])
@pytest.mark.parametrize(("reasoning", "text", "calls"), REPLIES)
def test_responses_events_are_the_sdks_and_add_up(
    reasoning: str, text: str, calls: list[tuple[str, str, str]], looked: bool
) -> None:
    door = ResponsesDoor(None)
    body = {"model": "chat", "input": "q", "store": False, "stream": True, "instructions": 'be "brief" ✓'}
    exchange = _exchange(door, body)
    events = _events(_stream(door, exchange, _answer(reasoning, text, calls), looked))
    for name, data in events:
        assert data["type"] == name
        OPENAI_EVENT.validate_python(data)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    deltas: dict[str, str] = {}
    for name, data in events:
        if name.endswith(".delta"):
            deltas[data["item_id"]] = deltas.get(data["item_id"], "") + data["delta"]
    final = events[-1][1]["response"]
    assert events[-1][0] == "response.completed"
    done = [data["item"] for name, data in events if name == "response.output_item.done"]
    assert final["output"] == done
    for item in done:
        if item["type"] == "message":
            assert deltas[item["id"]] == item["content"][0]["text"] == text
        elif item["type"] == "function_call":
            assert deltas[item["id"]] == item["arguments"]
        else:
            assert deltas[item["id"]] == item["content"][0]["text"] == reasoning
    assert final["usage"]["input_tokens_details"]["cached_tokens"] == 32
    assert final["instructions"] == 'be "brief" ✓'
    assert final["model"] == 'chat "alias" ✓'
    # the same reply, not streamed: the same response, but for item ids and the id
    answered = orjson.loads(asyncio.run(door.response(exchange, _non_streamed(reasoning, text, calls))))
    assert _without_ids(final["output"]) == _without_ids(answered["output"])
    assert {k: v for k, v in final.items() if k != "output"} == {
        k: v for k, v in answered.items() if k != "output"
    }


@pytest.mark.parametrize("looked", [True, False], ids=["looked", "fresh"])
@pytest.mark.parametrize(("reasoning", "text", "calls"), REPLIES)
def test_messages_events_are_the_sdks_and_add_up(
    reasoning: str, text: str, calls: list[tuple[str, str, str]], looked: bool
) -> None:
    door = MessagesDoor()
    body = {
        "model": "chat",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "q"}],
        "thinking": {"type": "enabled", "budget_tokens": 2048},
    }
    exchange = _exchange(door, body)
    events = _events(_stream(door, exchange, _answer(reasoning, text, calls), looked))
    for name, data in events:
        assert data["type"] == name
        if name != "ping":  # the SDK skips pings; they are not among its event types
            ANTHROPIC_EVENT.validate_python(data)
    assert [name for name, _ in events[:2]] == ["message_start", "ping"]
    assert [name for name, _ in events[-2:]] == ["message_delta", "message_stop"]
    answered = orjson.loads(asyncio.run(door.response(exchange, _non_streamed(reasoning, text, calls))))
    assert _content(events) == answered["content"]
    start, delta = events[0][1]["message"], events[-2][1]
    assert start["id"] == answered["id"]
    assert start["model"] == answered["model"] == 'chat "alias" ✓'
    assert delta["delta"]["stop_reason"] == answered["stop_reason"]
    assert delta["usage"] == answered["usage"]
    assert delta["usage"]["cache_read_input_tokens"] == 32


@pytest.mark.parametrize("door_name", ["responses", "messages"])
def test_text_a_guard_changed_after_the_first_look_is_what_is_sent(door_name: str) -> None:
    """The encoders take a text chunk's text from the first guard's look (`Chunk.text_delta`,
    kept on the chunk) unless a later guard changed the chunk, as redaction does (`dirty`):
    then the chunk itself is read, and the text as it was looked at is never sent."""
    if door_name == "responses":
        door: Any = ResponsesDoor(None)
        body: dict[str, Any] = {"model": "chat", "input": "q", "store": False, "stream": True}
    else:
        door = MessagesDoor()
        body = {"model": "chat", "max_tokens": 64, "stream": True}
        body["messages"] = [{"role": "user", "content": "q"}]
    exchange = _exchange(door, body)
    encoder = door.stream(exchange)
    sent = []
    for text in ("", "Pay with ", "4111 1111 1111 1111", " today.", None):
        data = _chunk({"content": text} if text is not None else {}, None if text is not None else "stop")
        chunk = Chunk(orjson.dumps(data), data)
        chunk.text_delta()
        if text and text[0] == "4":  # a guard masks the number after the first look
            data["choices"][0]["delta"]["content"] = "[CARD]"
            chunk.dirty = True
        sent.append(encoder.chunk(chunk))
    sent.append(asyncio.run(encoder.done()))
    raw = b"".join(sent)
    assert b"4111" not in raw
    events = _events(raw)
    if door_name == "responses":
        deltas = "".join(data["delta"] for name, data in events if name == "response.output_text.delta")
        assert events[-1][1]["response"]["output"][0]["content"][0]["text"] == deltas
    else:
        deltas = "".join(data["delta"]["text"] for name, data in events if name == "content_block_delta")
    assert deltas == "Pay with [CARD] today."


def _content(events: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """The content blocks a client puts together from the events: started, added to, stopped
    in order, a tool's input its JSON deltas joined and parsed."""
    blocks: list[dict[str, Any]] = []
    json_parts: dict[int, str] = {}
    open_block = None
    for name, data in events:
        if name == "content_block_start":
            assert open_block is None and data["index"] == len(blocks)
            open_block = data["index"]
            blocks.append(dict(data["content_block"]))
        elif name == "content_block_delta":
            assert data["index"] == open_block
            block, delta = blocks[open_block], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            else:
                assert delta["type"] == "input_json_delta"
                json_parts[open_block] = json_parts.get(open_block, "") + delta["partial_json"]
        elif name == "content_block_stop":
            assert data["index"] == open_block
            open_block = None
    for index, arguments in json_parts.items():
        blocks[index]["input"] = json.loads(arguments)
    assert open_block is None
    return blocks


CALLS = [
    ("call_1", "get_weather"),
    ('call_"q"', 'wé"ird\\name'),
    ("call_\u2028", "😀\x01"),
    ("", ""),  # no id (one is made) and no name
]


@pytest.mark.parametrize(("call_id", "name"), CALLS)
@pytest.mark.parametrize("finish", ["tool_calls", "length"])
def test_responses_call_templates_are_the_generic_encoding(call_id: str, name: str, finish: str) -> None:
    """A function call's events and the last event are byte templates: each event's data is
    exactly what orjson makes of the same object, and each item is `call_item`'s, in its order."""
    door = ResponsesDoor(None)
    exchange = _exchange(door, {"model": "chat", "input": "q", "store": False, "stream": True})
    arguments = '{"note": "\u2028😀\\"x\\""}'
    chunks = _answer("", "", [(call_id, name, arguments)])
    chunks[-1] = _chunk({}, finish)
    raw = _stream(door, exchange, chunks)
    events = _events(raw)
    for block in raw[:-2].split(b"\n\n"):
        data = block.split(b"\n")[1][6:]
        assert orjson.dumps(orjson.loads(data)) == data
    added = [data["item"] for kind, data in events if kind == "response.output_item.added"]
    done = [data["item"] for kind, data in events if kind == "response.output_item.done"]
    assert len(added) == len(done) == 1
    item_id, made_id = added[0]["id"], added[0]["call_id"]
    assert made_id == call_id or (not call_id and made_id.startswith("call_") and len(made_id) == 29)
    assert list(added[0].items()) == list(call_item(item_id, made_id, name, "", "in_progress").items())
    assert list(done[0].items()) == list(call_item(item_id, made_id, name, arguments).items())
    (arguments_done,) = [data for kind, data in events if kind == "response.function_call_arguments.done"]
    assert list(arguments_done) == ["type", "sequence_number", "item_id", "output_index", "name", "arguments"]
    assert (arguments_done["name"], arguments_done["arguments"]) == (name, arguments)
    last_kind, last = events[-1]
    status = "completed" if finish == "tool_calls" else "incomplete"
    assert last_kind == f"response.{status}"
    assert last["response"]["status"] == status
    assert last["response"]["output"] == done
    reason = None if status == "completed" else {"reason": "max_output_tokens"}
    assert last["response"]["incomplete_details"] == reason
    assert last["response"]["usage"] == usage(exchange.usage)
