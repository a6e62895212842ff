"""Rendering a ``ChatReply`` as OpenAI ``chat.completion.chunk`` server-sent events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from simulator.chat import ChatReply, slices

DONE = b"data: [DONE]\n\n"
MALFORMED = b"data: {not json\n\n"
_CHOICE_HEAD = b'[{"index":0,"delta":'
_CHOICE_TAIL = b',"finish_reason":null,"logprobs":null}]}\n\n'


@dataclass(slots=True)
class StreamPlan:
    """All events of a stream; events ``1..token_events`` each carry generated tokens."""

    events: list[bytes]
    token_events: int


def stream_plan(
    reply: ChatReply, completion_id: str, created: int, model: str, usage: dict[str, Any] | None
) -> StreamPlan:
    """Role chunk, content/tool-call deltas, finish chunk, optional usage chunk, ``[DONE]``."""
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
    opener = head + _CHOICE_HEAD
    role_content = None if reply.tool_calls and not reply.pieces else ""
    events = [opener + orjson.dumps({"role": "assistant", "content": role_content}) + _CHOICE_TAIL]
    events.extend(opener + orjson.dumps({"content": piece}) + _CHOICE_TAIL for piece in reply.pieces)
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
    token_events = len(events) - 1
    finish = b',"finish_reason":' + orjson.dumps(reply.finish_reason) + b',"logprobs":null}]}\n\n'
    events.append(opener + b"{}" + finish)
    if usage is not None:
        events.append(head + b'[],"usage":' + orjson.dumps(usage) + b"}\n\n")
    events.append(DONE)
    return StreamPlan(events, token_events)


def native_stream_plan(reply: ChatReply, usage: dict[str, Any]) -> StreamPlan:
    """The older Workers AI models' stream: ``{"response": piece}`` events, usage on the last."""
    events = [b"data: " + orjson.dumps({"response": piece}) + b"\n\n" for piece in reply.pieces]
    token_events = len(events)
    events.append(b"data: " + orjson.dumps({"response": "", "usage": usage}) + b"\n\n")
    events.append(DONE)
    return StreamPlan(events, token_events)
