"""Guarded chat chunks as the Responses API's stream events.

    response.created, response.in_progress                     at the first chunk
    response.output_item.added / .done                         one item per run of reasoning,
                                                               text or a tool call
    response.content_part.added / .done,
    response.output_text.delta / .done                         a message item's text
    response.reasoning_text.delta / .done                      a reasoning item's text
    response.function_call_arguments.delta / .done             a function_call item's arguments
    response.completed (or response.incomplete), with usage    when the stream has ended
    error, response.failed                                     a failure after the stream started

Every event carries the next `sequence_number`; an item is closed when the next one begins or
the choice finishes. Only the first choice is translated (the door never asks for more).

Encoding is kept to the bytes that change: the response object's invariant fields (id, model,
the echoed request fields, tools and instructions among them) are serialised once per stream
and spliced into `response.created`, `.in_progress` and `.completed`; a message item's events
are byte templates around its id and its text, the text serialised once; each item is
serialised once, and `response.completed`'s output is those bytes joined.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from gateway.doors.chunks import MoreReader, more_arguments, more_text
from gateway.doors.responses import (
    INCOMPLETE,
    ResponsesState,
    call_item,
    reasoning_item,
    response_object,
    stored,
    usage,
)
from gateway.errors import GatewayError
from gateway.exchange import Exchange
from gateway.ports import Chunk

_FAST: dict[str, MoreReader] = {
    "message": more_text,
    "function_call": more_arguments,
}  # what a fast chunk may add
_BEGUN = (
    b'{"response":{"status":"in_progress","output":[],"incomplete_details":null,"usage":null,"error":null,'
)
_PART_ADDED = (
    b'{"item_id":"%s","output_index":%d,"content_index":0,'
    b'"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}}'
)
_MESSAGE_ADDED = (
    b'{"output_index":%d,"item":{"type":"message","id":"%s","role":"assistant",'
    b'"status":"in_progress","content":[]}}'
)
_PART = b'{"type":"output_text","text":%s,"annotations":[],"logprobs":[]}'
_MESSAGE = b'{"type":"message","id":"%s","role":"assistant","status":"completed","content":[%s]}'
_TEXT_DONE = b'{"item_id":"%s","output_index":%d,"content_index":0,"text":%s,"logprobs":[]}'
_PART_DONE = b'{"item_id":"%s","output_index":%d,"content_index":0,"part":%s}'
_ITEM_DONE = b'{"output_index":%d,"item":%s}'
_DELTA_EVENTS = {
    "message": "response.output_text.delta",
    "reasoning": "response.reasoning_text.delta",
    "function_call": "response.function_call_arguments.delta",
}


def _head(kind: str) -> bytes:
    """An event's bytes up to its sequence number."""
    name = kind.encode()
    return b'event: %s\ndata: {"type":"%s","sequence_number":' % (name, name)


_TAILED = 1024  # delta events whose end (the sequence number) is kept encoded
_TAILS = tuple(b',"sequence_number":%d}\n\n' % sequence for sequence in range(_TAILED))


def _tail(sequence: int) -> bytes:
    """A delta event's end: its sequence number."""
    return _TAILS[sequence] if sequence < _TAILED else b',"sequence_number":%d}\n\n' % sequence


_HEADS = {
    kind: _head(kind)
    for kind in (
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    )
}


class ResponsesStream:
    __slots__ = (
        "_call",
        "_delta_head",
        "_encoded",
        "_exchange",
        "_fast",
        "_fast_index",
        "_finish",
        "_kind",
        "_out",
        "_sequence",
        "_shell",
        "_started",
        "_state",
        "_text",
    )

    def __init__(self, exchange: Exchange) -> None:
        self._exchange = exchange
        self._state: ResponsesState = exchange.door_state
        self._sequence = 0
        self._started = False
        self._shell = b""  # the response object's invariant fields, encoded, without braces
        self._encoded: list[bytes] = []  # finished output items, encoded
        self._kind: str | None = None  # the open item's type
        self._fast: MoreReader | None = None  # reads what a chunk adds to the open item
        self._fast_index: Any = None  # the chat index of the open function call
        self._text: list[str] = []  # the open item's text or arguments so far
        self._call: dict[str, Any] = {}  # the open function call: chat index, ids, name
        self._finish: str | None = None
        self._out: list[bytes] = []
        self._delta_head = b""  # the open item's delta event, up to its delta

    def chunk(self, chunk: Chunk) -> bytes:
        choices = chunk.data.get("choices")
        fast = self._fast
        if fast is not None and choices:
            more = fast(choices, self._fast_index)
            if more is not None:  # the common case: more text, or more arguments, for the open item
                sequence = self._sequence
                self._sequence = sequence + 1
                self._text.append(more)
                return self._delta_head + orjson.dumps(more) + _tail(sequence)
        if not self._started:
            self._start()
        for choice in choices or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta(delta)
            finish = choice.get("finish_reason")
            if isinstance(finish, str):
                self._close()
                self._finish = finish
        return self._flush()

    async def done(self) -> bytes:
        if not self._started:
            self._start()
        self._close()
        reason = INCOMPLETE.get(self._finish) if self._finish else None
        status = "incomplete" if reason else "completed"
        kind = "response.completed" if status == "completed" else "response.incomplete"
        state = self._state
        if state.store:  # the record needs the whole object
            items = orjson.loads(b"[%s]" % b",".join(self._encoded))
            final = response_object(state, self._exchange.model_alias, status, items)
            final["usage"] = usage(self._exchange.usage)
            if reason:
                final["incomplete_details"] = {"reason": reason}
            if not await stored(self._exchange, final, items):
                final["store"] = False
                self._emit(kind, {"response": final})
                return self._flush()
        incomplete = b'{"reason":"%s"}' % reason.encode() if reason else b"null"
        counted = orjson.dumps(usage(self._exchange.usage))
        self._emit_encoded(kind, self._response(status, incomplete, counted, b"null"))
        return self._flush()

    def error(self, error: GatewayError) -> bytes:
        """An `error` event, then `response.failed` with what was produced so far."""
        self._emit("error", {"code": error.code, "message": error.message, "param": error.param})
        if self._started:
            failure = orjson.dumps({"code": error.code or "server_error", "message": error.message})
            self._emit_encoded("response.failed", self._response("failed", b"null", b"null", failure))
        return self._flush()

    def _response(self, status: str, incomplete: bytes, counted: bytes, error: bytes) -> bytes:
        """`{"response": ...}` with the items so far, spliced into the invariant fields."""
        return (
            b'{"response":{"status":"%s","output":[%s],"incomplete_details":%s,"usage":%s,"error":%s,%s}}'
            % (
                status.encode(),
                b",".join(self._encoded),
                incomplete,
                counted,
                error,
                self._shell,
            )
        )

    def _emit(self, kind: str, data: dict[str, Any]) -> None:
        self._emit_encoded(kind, orjson.dumps(data))

    def _emit_encoded(self, kind: str, data: bytes) -> None:
        """An event whose fields (a JSON object, not empty) are already encoded."""
        head = _HEADS.get(kind) or _head(kind)
        self._out.append(b"%s%d,%s\n\n" % (head, self._sequence, data[1:]))
        self._sequence += 1

    def _flush(self) -> bytes:
        out = self._out
        if len(out) == 1:
            return out.pop()
        self._out = []
        return b"".join(out)

    def _start(self) -> None:
        self._started = True
        state = self._state
        invariant = {
            "id": state.response_id,
            "object": "response",
            "created_at": state.created_at,
            "model": self._exchange.model_alias,
            **state.echo,
        }
        self._shell = orjson.dumps(invariant)[1:-1]
        begun = _BEGUN + self._shell + b"}}"
        self._emit_encoded("response.created", begun)
        self._emit_encoded("response.in_progress", begun)

    def _delta(self, delta: dict[str, Any]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            self._open("reasoning")
            self._text_delta(reasoning)
        content = delta.get("content")
        if isinstance(content, str) and content:
            self._open("message")
            self._text_delta(content)
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                self._tool_call(call)

    def _tool_call(self, call: dict[str, Any]) -> None:
        index = call.get("index", 0)
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        if self._kind != "function_call" or self._call.get("index") != index:
            self._close()
            self._call = {
                "index": index,
                "call_id": call.get("id") or f"call_{secrets.token_hex(12)}",
                "name": function.get("name") or "",
            }
            self._open("function_call")
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._text_delta(arguments)

    def _text_delta(self, text: str) -> None:
        """The open item's delta event, its fixed part encoded once per item."""
        self._out.append(self._delta_head + orjson.dumps(text) + _tail(self._sequence))
        self._sequence += 1
        self._text.append(text)

    def _open(self, kind: str) -> None:
        if self._kind == kind and kind != "function_call":
            return
        if kind != "function_call":
            self._close()
            self._call = {}
        self._kind = kind
        self._fast = _FAST.get(kind)
        self._fast_index = self._call.get("index")
        self._text = []
        output_index = len(self._encoded)
        # Item ids: the response's own random part and the item's place (unique, no syscall)
        prefix = {"message": "msg", "reasoning": "rs", "function_call": "fc"}[kind]
        self._call["id"] = item_id = f"{prefix}_{self._state.response_id[5:29]}{output_index:04x}"
        delta_kind = _DELTA_EVENTS[kind]
        if kind == "message":  # the common item: its events are templates around its (hex) id
            ident = item_id.encode()
            self._emit_encoded("response.output_item.added", _MESSAGE_ADDED % (output_index, ident))
            self._emit_encoded("response.content_part.added", _PART_ADDED % (ident, output_index))
            self._delta_head = (
                b'event: %s\ndata: {"type":"%s","item_id":"%s","output_index":%d,"content_index":0,'
                b'"logprobs":[],"delta":' % (delta_kind.encode(), delta_kind.encode(), ident, output_index)
            )
            return
        if kind == "reasoning":
            item = {**reasoning_item(item_id, ""), "content": [], "status": "in_progress"}
        else:
            item = call_item(item_id, self._call["call_id"], self._call["name"], "", "in_progress")
        self._emit("response.output_item.added", {"output_index": output_index, "item": item})
        where: dict[str, Any] = {"type": delta_kind, "item_id": item_id, "output_index": output_index}
        if kind != "function_call":
            where["content_index"] = 0
        self._delta_head = (
            b"event: %s\ndata: %s," % (delta_kind.encode(), orjson.dumps(where)[:-1]) + b'"delta":'
        )

    def _close(self) -> None:
        kind = self._kind
        if kind is None:
            return
        item_id = self._call["id"]
        output_index = len(self._encoded)
        text = "".join(self._text)
        if kind == "message":
            ident = item_id.encode()
            text_json = orjson.dumps(text)
            part = _PART % text_json
            encoded = _MESSAGE % (ident, part)
            self._emit_encoded("response.output_text.done", _TEXT_DONE % (ident, output_index, text_json))
            self._emit_encoded("response.content_part.done", _PART_DONE % (ident, output_index, part))
        else:
            where = {"item_id": item_id, "output_index": output_index}
            item: dict[str, Any]
            if kind == "reasoning":
                item = reasoning_item(item_id, text)
                self._emit("response.reasoning_text.done", {**where, "content_index": 0, "text": text})
            else:
                call = self._call
                item = call_item(item_id, call["call_id"], call["name"], text)
                self._emit(
                    "response.function_call_arguments.done",
                    {**where, "name": call["name"], "arguments": text},
                )
            encoded = orjson.dumps(item)
        self._emit_encoded("response.output_item.done", _ITEM_DONE % (output_index, encoded))
        self._encoded.append(encoded)
        self._kind = None
        self._fast = None
        self._text = []
