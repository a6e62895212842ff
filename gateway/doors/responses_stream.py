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
and a function call's are byte templates around its ids, its name and its text (each
serialised once), the events a step sends together written in one formatting; each item is
serialised once, and `response.completed`'s output is those bytes joined. A chunk that only
adds text or arguments to the open item (`chunks.py`) costs one read and one concatenation.
"""

from __future__ import annotations

from typing import Any

import orjson
from orjson import dumps

from gateway.doors.chunks import MoreReader, more_arguments, more_text
from gateway.doors.responses import (
    INCOMPLETE,
    ResponsesState,
    reasoning_item,
    response_object,
    stored,
    usage,
)
from gateway.errors import GatewayError
from gateway.exchange import Exchange
from gateway.ports import Chunk
from gateway.random_ids import random_hex

# Templates hold an event's fields after its sequence number (the event's `{"type": ...,
# "sequence_number": N` comes first): each starts with the comma that follows N.
_SHELL = b'"id":%s,"object":"response","created_at":%d,"model":%s,%s'
_BEGUN = (
    b',"response":{"status":"in_progress","output":[],"incomplete_details":null,"usage":null,"error":null,'
)
_STARTED = (  # response.created and response.in_progress, a stream's first two: (shell) each
    b'event: response.created\ndata: {"type":"response.created","sequence_number":0'
    + _BEGUN
    + b"%s}}\n\n"
    + b'event: response.in_progress\ndata: {"type":"response.in_progress","sequence_number":1'
    + _BEGUN
    + b"%s}}\n\n"
)
_MESSAGE_OPENED = (  # output_item.added and content_part.added: sequence, index, id; sequence, id, index
    b'event: response.output_item.added\ndata: {"type":"response.output_item.added","sequence_number":%d,'
    b'"output_index":%d,"item":{"type":"message","id":"%s","role":"assistant","status":"in_progress",'
    b'"content":[]}}\n\n'
    b'event: response.content_part.added\ndata: {"type":"response.content_part.added","sequence_number":%d,'
    b'"item_id":"%s","output_index":%d,"content_index":0,'
    b'"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}}\n\n'
)
_TEXT_DELTA_HEAD = (
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"%s",'
    b'"output_index":%d,"content_index":0,"logprobs":[],"delta":'
)
_PART = b'{"type":"output_text","text":%s,"annotations":[],"logprobs":[]}'
_MESSAGE = b'{"type":"message","id":"%s","role":"assistant","status":"completed","content":[%s]}'
_MESSAGE_CLOSED = (  # output_text.done and content_part.done: sequence, id, index, text / part
    b'event: response.output_text.done\ndata: {"type":"response.output_text.done","sequence_number":%d,'
    b'"item_id":"%s","output_index":%d,"content_index":0,"text":%s,"logprobs":[]}\n\n'
    b'event: response.content_part.done\ndata: {"type":"response.content_part.done","sequence_number":%d,'
    b'"item_id":"%s","output_index":%d,"content_index":0,"part":%s}\n\n'
)
# A function_call item (`responses.call_item`'s shape): id, call_id, name, arguments, status
_CALL = b'{"type":"function_call","id":"%s","call_id":%s,"name":%s,"arguments":%s,"status":"%s"}'
_CALL_DELTA_HEAD = (
    b'event: response.function_call_arguments.delta\ndata: {"type":"response.function_call_arguments.delta",'
    b'"item_id":"%s","output_index":%d,"delta":'
)
_ARGUMENTS_DONE = (  # sequence, id, index, name, arguments
    b'event: response.function_call_arguments.done\ndata: {"type":"response.function_call_arguments.done",'
    b'"sequence_number":%d,"item_id":"%s","output_index":%d,"name":%s,"arguments":%s}\n\n'
)
_CALL_OPENED = (  # output_item.added: sequence, index, id, call_id, name (`_CALL`, no arguments yet)
    b'event: response.output_item.added\ndata: {"type":"response.output_item.added","sequence_number":%d,'
    b'"output_index":%d,"item":{"type":"function_call","id":"%s","call_id":%s,"name":%s,"arguments":"",'
    b'"status":"in_progress"}}\n\n'
)
_ITEM_DONE = (  # sequence, index, item
    b'event: response.output_item.done\ndata: {"type":"response.output_item.done","sequence_number":%d,'
    b'"output_index":%d,"item":%s}\n\n'
)
_CALL_CLOSED = _ARGUMENTS_DONE + _ITEM_DONE
_MESSAGE_DONE = _MESSAGE_CLOSED + _ITEM_DONE
_RESPONSE = b',"response":{"status":"%s","output":[%s],"incomplete_details":%s,"usage":%s,"error":%s,%s}}'
_FAST: dict[str, MoreReader] = {"message": more_text}  # what a fast chunk may add to an open item
_ID_PREFIXES = {"message": "msg", "reasoning": "rs"}


def _head(kind: str) -> bytes:
    """An event's bytes up to its sequence number."""
    name = kind.encode()
    return b'event: %s\ndata: {"type":"%s","sequence_number":' % (name, name)


class _Tails(dict[int, bytes]):
    """A delta event's end, its sequence number: kept encoded for the first 1024 of a stream."""

    def __missing__(self, sequence: int) -> bytes:
        return b',"sequence_number":%d}\n\n' % sequence


_TAILS = _Tails((sequence, b',"sequence_number":%d}\n\n' % sequence) for sequence in range(1024))


_HEADS = {
    kind: _head(kind)
    for kind in (
        "response.output_item.added",
        "response.reasoning_text.done",
        "response.completed",
    )
}
# The last event, by the response's status (no error): sequence, output, incomplete_details,
# usage, the invariant fields
_ENDED = {
    status: _head(f"response.{status}")
    + b"%d"
    + _RESPONSE.replace(b'"status":"%s"', b'"status":"%s"' % status.encode()).replace(
        b'"error":%s', b'"error":null'
    )
    + b"\n\n"
    for status in ("completed", "incomplete")
}


class ResponsesStream:
    __slots__ = (
        "_call_id",
        "_call_name",
        "_delta_head",
        "_encoded",
        "_exchange",
        "_fast",
        "_fast_index",
        "_finish",
        "_ident",
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
        self._ident = b""  # the open item's id
        self._fast: MoreReader | None = None  # reads what a chunk adds to the open item
        self._fast_index: Any = None  # the chat index of the open function call
        self._text: list[str] = []  # the open item's text or arguments so far
        self._call_id = b""  # the open function call's call id and name, encoded
        self._call_name = b""
        self._finish: str | None = None
        self._out: list[bytes] = []
        self._delta_head = b""  # the open item's delta event, up to its delta

    def chunk(self, chunk: Chunk) -> bytes:
        fast = self._fast
        if fast is not None:
            more = fast(chunk, self._fast_index)
            if more is not None:  # the common case: more text, or more arguments, for the open item
                sequence = self._sequence
                self._sequence = sequence + 1
                self._text.append(more)
                return self._delta_head + dumps(more) + _TAILS[sequence]
        if not self._started:
            self._start()
        for choice in chunk.data.get("choices") or ():
            if choice.__class__ is not dict or choice.get("index"):
                continue  # only the first choice (index 0 or left out) is translated
            delta = choice.get("delta")
            if delta and delta.__class__ is dict:
                self._delta(delta)
            finish = choice.get("finish_reason")
            if finish.__class__ is str:
                self._close()
                self._finish = finish
        return self._flush()

    async def done(self) -> bytes:
        if not self._started:
            self._start()
        self._close()
        reason = INCOMPLETE.get(self._finish) if self._finish else None
        status = "incomplete" if reason else "completed"
        state = self._state
        if state.store:  # the record needs the whole object
            kind = f"response.{status}"
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
        counted = dumps(usage(self._exchange.usage))
        sequence = self._sequence
        self._sequence = sequence + 1
        ended = _ENDED[status] % (sequence, b",".join(self._encoded), incomplete, counted, self._shell)
        if not self._out:  # the usual end: the last item was closed by the finishing chunk
            return ended
        self._out.append(ended)
        return self._flush()

    def error(self, error: GatewayError) -> bytes:
        """An `error` event, then `response.failed` with what was produced so far."""
        self._emit("error", {"code": error.code, "message": error.message, "param": error.param})
        if self._started:
            failure = dumps({"code": error.code or "server_error", "message": error.message})
            self._emit_fields("response.failed", self._response("failed", b"null", b"null", failure))
        return self._flush()

    def _response(self, status: str, incomplete: bytes, counted: bytes, error: bytes) -> bytes:
        """`,"response": ...}` with the items so far, spliced into the invariant fields."""
        output = b",".join(self._encoded)
        return _RESPONSE % (status.encode(), output, incomplete, counted, error, self._shell)

    def _emit(self, kind: str, data: dict[str, Any]) -> None:
        self._emit_fields(kind, b"," + dumps(data)[1:])

    def _emit_fields(self, kind: str, fields: bytes) -> None:
        """An event whose fields after its sequence number (`,...}`) are already encoded."""
        head = _HEADS.get(kind) or _head(kind)
        self._out.append(b"%s%d%s\n\n" % (head, self._sequence, fields))
        self._sequence += 1

    def _flush(self) -> bytes:
        out = self._out
        if len(out) == 1:
            return out.pop()
        self._out = []
        return b"".join(out)

    def _start(self) -> None:
        """The first events (sequence numbers 0 and 1: nothing is sent before them)."""
        self._started = True
        state = self._state
        # {"id", "object", "created_at", "model", then the echoed fields}, without the braces
        self._shell = shell = _SHELL % (
            dumps(state.response_id),
            state.created_at,
            dumps(self._exchange.model_alias),
            dumps(state.echo)[1:-1],  # never empty: it holds every echoed field, defaults included
        )
        self._sequence = 2
        self._out.append(_STARTED % (shell, shell))

    def _delta(self, delta: dict[str, Any]) -> None:
        """A chunk's delta: reasoning, then text, then tool calls, each its item's events."""
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and reasoning.__class__ is str:
            self._open("reasoning")
            self._text_delta(reasoning)
        content = delta.get("content")
        if content and content.__class__ is str:
            self._open("message")
            self._text_delta(content)
        calls = delta.get("tool_calls")
        if not calls:
            return
        for call in calls:
            if call.__class__ is not dict:
                continue
            index = call.get("index", 0)
            function = call.get("function")
            if function.__class__ is not dict:
                function = {}
            if self._fast_index != index or self._kind != "function_call":
                self._close()
                call_id = call.get("id") or f"call_{random_hex(12)}"
                self._open_call(index, call_id, function.get("name") or "")
            arguments = function.get("arguments")
            if arguments and arguments.__class__ is str:
                self._text_delta(arguments)

    def _text_delta(self, text: str) -> None:
        """The open item's delta event, its fixed part encoded once per item."""
        sequence = self._sequence
        self._sequence = sequence + 1
        self._out.append(self._delta_head + dumps(text) + _TAILS[sequence])
        self._text.append(text)

    def _open_call(self, index: Any, call_id: Any, name: Any) -> None:
        """A function_call item's opening: its `output_item.added`, one template."""
        self._kind = "function_call"
        self._fast = more_arguments
        self._fast_index = index
        self._text = []
        output_index = len(self._encoded)
        # Item ids: the response's own random part and the item's place (unique, no syscall)
        self._ident = ident = f"fc_{self._state.response_id[5:29]}{output_index:04x}".encode()
        self._call_id = call_json = dumps(call_id)
        self._call_name = name_json = dumps(name)
        sequence = self._sequence
        self._sequence = sequence + 1
        self._out.append(_CALL_OPENED % (sequence, output_index, ident, call_json, name_json))
        self._delta_head = _CALL_DELTA_HEAD % (ident, output_index)

    def _open(self, kind: str) -> None:
        """A message or reasoning item's opening (function calls: `_open_call`)."""
        if self._kind == kind:
            return
        self._close()
        self._kind = kind
        self._fast = _FAST.get(kind)
        self._fast_index = None
        self._text = []
        output_index = len(self._encoded)
        # Item ids: the response's own random part and the item's place (unique, no syscall)
        item_id = f"{_ID_PREFIXES[kind]}_{self._state.response_id[5:29]}{output_index:04x}"
        self._ident = ident = item_id.encode()  # hex: no escaping needed
        sequence = self._sequence
        if kind == "message":  # the common item
            self._out.append(
                _MESSAGE_OPENED % (sequence, output_index, ident, sequence + 1, ident, output_index)
            )
            self._sequence = sequence + 2
            self._delta_head = _TEXT_DELTA_HEAD % (ident, output_index)
            return
        opened = {**reasoning_item(item_id, ""), "content": [], "status": "in_progress"}
        self._emit("response.output_item.added", {"output_index": output_index, "item": opened})
        where = {"type": "response.reasoning_text.delta", "item_id": item_id, "output_index": output_index}
        self._delta_head = (
            b"event: response.reasoning_text.delta\ndata: %s," % dumps({**where, "content_index": 0})[:-1]
            + b'"delta":'
        )

    def _close(self) -> None:
        kind = self._kind
        if kind is None:
            return
        ident = self._ident
        output_index = len(self._encoded)
        text = "".join(self._text)
        sequence = self._sequence
        if kind == "message":
            text_json = dumps(text)
            part = _PART % text_json
            encoded = _MESSAGE % (ident, part)
            closed = _MESSAGE_DONE % (
                sequence,
                ident,
                output_index,
                text_json,
                sequence + 1,
                ident,
                output_index,
                part,
                sequence + 2,
                output_index,
                encoded,
            )
            self._sequence = sequence + 3
        elif kind == "function_call":
            name = self._call_name
            arguments = dumps(text)
            encoded = _CALL % (ident, self._call_id, name, arguments, b"completed")
            closed = _CALL_CLOSED % (
                sequence,
                ident,
                output_index,
                name,
                arguments,
                sequence + 1,
                output_index,
                encoded,
            )
            self._sequence = sequence + 2
        else:
            item_id = ident.decode()
            encoded = dumps(reasoning_item(item_id, text))
            where = {"item_id": item_id, "output_index": output_index, "content_index": 0, "text": text}
            closed = b"%s%d,%s\n\n" % (_HEADS["response.reasoning_text.done"], sequence, dumps(where)[1:])
            closed += _ITEM_DONE % (sequence + 1, output_index, encoded)
            self._sequence = sequence + 2
        self._out.append(closed)
        self._encoded.append(encoded)
        self._kind = None
        self._fast = None
        self._text = []
