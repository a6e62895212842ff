"""Rendering a ``ChatReply`` as OpenAI ``chat.completion.chunk`` server-sent events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from simulator.chat import ChatReply, Rendering, choice_extras, slices

DONE = b"data: [DONE]\n\n"
MALFORMED = b"data: {not json\n\n"
_CHOICE_TAIL = b',"finish_reason":null,"logprobs":null}]}\n\n'


@dataclass(slots=True)
class StreamPlan:
    """All events of a stream; events ``1..token_events`` each carry generated tokens."""

    events: list[bytes]
    token_events: int


def stream_plan(
    choices: list[ChatReply],
    completion_id: str,
    created: int,
    model: str,
    usage: dict[str, Any] | None,
    rendering: Rendering,
    timings: dict[str, Any] | None = None,
) -> StreamPlan:
    """Per choice: role chunk, reasoning/content/tool-call deltas, finish chunk; then the optional
    usage chunk (``timings`` rides on it, or on the last finish chunk), then ``[DONE]``."""
    # Every chunk shares this prefix; serialise it once instead of a dict per chunk.
    head = b"".join(
        (
            b'data: {"id":',
            orjson.dumps(completion_id),
            b',"object":"chat.completion.chunk","created":',
            str(created).encode(),
            b',"model":',
            orjson.dumps(model),
            b',"choices":',
        )
    )
    events: list[bytes] = []
    reasoning_key = rendering.reasoning_field
    for choice_index, reply in enumerate(choices):
        opener = head + b'[{"index":' + str(choice_index).encode() + b',"delta":'
        role_content = None if reply.tool_calls and not reply.pieces else ""
        events.append(opener + orjson.dumps({"role": "assistant", "content": role_content}) + _CHOICE_TAIL)
        events.extend(
            opener + orjson.dumps({reasoning_key: piece}) + _CHOICE_TAIL for piece in reply.reasoning_pieces
        )
        deltas = reply.content_deltas
        if deltas is None:
            deltas = [orjson.dumps({"content": piece}) for piece in reply.pieces]
        events.extend(opener + delta + _CHOICE_TAIL for delta in deltas)
        for index, call in enumerate(reply.tool_calls):
            first = {
                "index": index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            events.append(opener + orjson.dumps({"tool_calls": [first]}) + _CHOICE_TAIL)
            for fragment in slices(call.arguments, reply.argument_chunk_chars):
                delta = {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}
                events.append(opener + orjson.dumps(delta) + _CHOICE_TAIL)
        extras = choice_extras(reply, rendering)
        finish = b"".join(
            (
                b',"finish_reason":',
                orjson.dumps(reply.finish_reason),
                b',"logprobs":null',
                orjson.dumps(extras)[1:-1].join((b",", b"")) if extras else b"",
                b"}]",
            )
        )
        events.append(opener + b"{}" + finish + b"}\n\n")
    token_events = len(events) - 1
    if usage is not None:
        tail = b',"timings":' + orjson.dumps(timings) if timings is not None else b""
        events.append(head + b'[],"usage":' + orjson.dumps(usage) + tail + b"}\n\n")
    elif timings is not None:
        events[-1] = events[-1][: -len(b"}\n\n")] + b',"timings":' + orjson.dumps(timings) + b"}\n\n"
    events.append(DONE)
    return StreamPlan(events, token_events)


def native_stream_plan(reply: ChatReply, usage: dict[str, Any]) -> StreamPlan:
    """The older Workers AI models' stream: ``{"response": piece}`` events, usage on the last."""
    events = [b"data: " + orjson.dumps({"response": piece}) + b"\n\n" for piece in reply.pieces]
    token_events = len(events)
    events.append(b"data: " + orjson.dumps({"response": "", "usage": usage}) + b"\n\n")
    events.append(DONE)
    return StreamPlan(events, token_events)
