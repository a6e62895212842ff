"""Guarded chat chunks as Anthropic's stream events.

    message_start (+ ping)                          at the first chunk
    content_block_start / _delta / _stop            one block per run of thinking, text or a tool
                                                    call (its arguments as input_json_delta)
    message_delta (stop_reason, usage) + message_stop   when the stream has ended
    error                                           a failure after the stream started

A block is closed when the next one begins or the choice finishes. Only the first choice is
translated (the door never asks for more). The fixed events are byte templates around what
changes (an index, the message's id and model, the stop reason and usage).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import orjson
from orjson import dumps

from gateway.doors.chunks import MoreReader, more_arguments, more_text
from gateway.doors.messages import MessagesState, error_body, error_kind, stop_reason, usage
from gateway.doors.sse import named_event
from gateway.errors import GatewayError
from gateway.exchange import Exchange
from gateway.ports import Chunk
from gateway.random_ids import random_hex

_PING = named_event("ping", {"type": "ping"})
_MESSAGE_START = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":%s,"type":"message",'
    b'"role":"assistant","model":%s,"content":[],"stop_reason":null,"stop_sequence":null,'
    b'"usage":{"input_tokens":0,"output_tokens":0}}}\n\n'
)
_BLOCK_START = b'event: content_block_start\ndata: {"type":"content_block_start","index":%d,"content_block":'
_STARTS = {  # a text or thinking block's start: (index)
    "text": _BLOCK_START + b'{"type":"text","text":""}}\n\n',
    "thinking": _BLOCK_START + b'{"type":"thinking","thinking":"","signature":""}}\n\n',
}
_TOOL_START = _BLOCK_START + b'{"type":"tool_use","id":%s,"name":%s,"input":{}}}\n\n'  # index, id, name
_BLOCK_STOP = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":%d}\n\n'
_MESSAGE_DELTA = (
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":%s,"stop_sequence":%s},'
    b'"usage":%s}\n\n'
)
_MESSAGE_STOP = named_event("message_stop", {"type": "message_stop"})
_FAST: dict[str, MoreReader] = {"text": more_text, "tool_use": more_arguments}  # what a fast chunk may add
_DELTA_TAIL = b"}}\n\n"
_NO_FINISH: Mapping[str, Any] = MappingProxyType({})
_DELTA_HEADS = {  # a block's delta event up to its text: (index)
    kind: b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%%d,'
    b'"delta":{"type":"%s","%s":' % (delta_type, field)
    for kind, delta_type, field in (
        ("text", b"text_delta", b"text"),
        ("thinking", b"thinking_delta", b"thinking"),
        ("tool_use", b"input_json_delta", b"partial_json"),
    )
}


class MessagesStream:
    __slots__ = (
        "_block",
        "_delta_head",
        "_exchange",
        "_fast",
        "_finish",
        "_next",
        "_started",
        "_state",
        "_tool",
    )

    def __init__(self, exchange: Exchange) -> None:
        self._exchange = exchange
        self._state: MessagesState = exchange.door_state
        self._started = False
        self._block: str | None = None  # "text", "thinking" or "tool_use": the open block
        self._tool: Any = -1  # the chat index of the open tool call
        self._next = 0  # the next block's index
        self._finish: Mapping[str, Any] = _NO_FINISH  # the finishing choice
        self._delta_head = b""  # the open block's delta event, up to its text
        self._fast: MoreReader | None = None  # reads what a chunk adds to the open block

    def chunk(self, chunk: Chunk) -> bytes:
        fast = self._fast
        if fast is not None:
            more = fast(chunk, self._tool)
            if more is not None:  # the common case: more text, or more arguments, for the open block
                return self._delta_head + dumps(more) + _DELTA_TAIL
        out: list[bytes] = []
        if not self._started:
            out.append(self._start())
        for choice in chunk.data.get("choices") or ():
            if choice.__class__ is not dict or choice.get("index"):
                continue  # only the first choice (index 0 or left out) is translated
            delta = choice.get("delta")
            if delta and delta.__class__ is dict:
                self._delta(delta, out)
            if choice.get("finish_reason").__class__ is str:
                self._close(out)
                self._finish = choice
        return out[0] if len(out) == 1 else b"".join(out)

    async def done(self) -> bytes:
        out: list[bytes] = [] if self._started else [self._start()]
        self._close(out)
        reason, sequence = stop_reason(self._finish, self._state)
        counted = orjson.dumps(usage(self._exchange.usage))
        out.append(_MESSAGE_DELTA % (orjson.dumps(reason), orjson.dumps(sequence), counted))
        out.append(_MESSAGE_STOP)
        return b"".join(out)

    def error(self, error: GatewayError) -> bytes:
        _, kind = error_kind(error)
        return named_event("error", error_body(kind, error.message))

    def _start(self) -> bytes:
        self._started = True
        model = orjson.dumps(self._exchange.model_alias)
        return _MESSAGE_START % (orjson.dumps(self._state.message_id), model) + _PING

    def _delta(self, delta: dict[str, Any], out: list[bytes]) -> None:
        if self._state.thinking:
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._open("thinking", out)
                out.append(self._delta_head + dumps(reasoning) + _DELTA_TAIL)
        text = delta.get("content")
        if text and text.__class__ is str:
            self._open("text", out)
            out.append(self._delta_head + dumps(text) + _DELTA_TAIL)
        if "refusal" in delta:
            text = delta["refusal"]
            if text and text.__class__ is str:
                self._open("text", out)
                out.append(self._delta_head + dumps(text) + _DELTA_TAIL)
        calls = delta.get("tool_calls")
        if calls:
            for call in calls:
                if call.__class__ is dict:
                    self._call(call, out)

    def _call(self, call: dict[str, Any], out: list[bytes]) -> None:
        index = call.get("index", 0)
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        if self._block != "tool_use" or index != self._tool:
            self._close(out)
            self._tool = index
            tool_id = call.get("id") or f"toolu_{random_hex(12)}"
            self._open("tool_use", out, (tool_id, function.get("name") or ""))
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            out.append(self._delta_head + dumps(arguments) + _DELTA_TAIL)

    def _open(self, kind: str, out: list[bytes], tool: tuple[Any, Any] | None = None) -> None:
        """Opens a block (a tool_use block: `tool` is its id and name)."""
        if self._block == kind and kind != "tool_use":
            return
        if self._block is not None and kind != "tool_use":
            self._close(out)
        self._block = kind
        self._fast = _FAST.get(kind)
        index = self._next
        self._delta_head = _DELTA_HEADS[kind] % index
        if tool is None:
            out.append(_STARTS[kind] % index)
        else:
            out.append(_TOOL_START % (index, dumps(tool[0]), dumps(tool[1])))

    def _close(self, out: list[bytes]) -> None:
        if self._block is None:
            return
        out.append(_BLOCK_STOP % self._next)
        self._block = None
        self._fast = None
        self._next += 1
