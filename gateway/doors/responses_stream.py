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
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from gateway.doors.chunks import continued
from gateway.doors.responses import (
    ResponsesState,
    call_item,
    finished,
    message_item,
    reasoning_item,
    response_object,
)
from gateway.errors import GatewayError
from gateway.exchange import Exchange
from gateway.ports import Chunk

_CONTINUED = {"message": "content", "function_call": "arguments"}  # what a fast chunk may add
_DELTA_EVENTS = {
    "message": "response.output_text.delta",
    "reasoning": "response.reasoning_text.delta",
    "function_call": "response.function_call_arguments.delta",
}


class ResponsesStream:
    __slots__ = (
        "_call",
        "_delta_head",
        "_exchange",
        "_finish",
        "_items",
        "_kind",
        "_out",
        "_sequence",
        "_started",
        "_state",
        "_text",
    )

    def __init__(self, exchange: Exchange) -> None:
        self._exchange = exchange
        self._state: ResponsesState = exchange.door_state
        self._sequence = 0
        self._started = False
        self._items: list[dict[str, Any]] = []  # finished output items
        self._kind: str | None = None  # the open item's type
        self._text: list[str] = []  # the open item's text or arguments so far
        self._call: dict[str, Any] = {}  # the open function call: chat index, ids, name
        self._finish: str | None = None
        self._out: list[bytes] = []
        self._delta_head = b""  # the open item's delta event, up to its delta

    def chunk(self, chunk: Chunk) -> bytes:
        choices = chunk.data.get("choices")
        if self._kind is not None and choices:
            more = continued(choices, _CONTINUED.get(self._kind), self._call.get("index"))
            if more is not None:  # the common case: more text, or more arguments, for the open item
                sequence = self._sequence
                self._sequence = sequence + 1
                self._text.append(more)
                return b'%s%s,"sequence_number":%d}\n\n' % (self._delta_head, orjson.dumps(more), sequence)
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
        final = await finished(self._exchange, self._items, self._finish)
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        self._emit(kind, {"response": final})
        return self._flush()

    def error(self, error: GatewayError) -> bytes:
        """An `error` event, then `response.failed` with what was produced so far."""
        self._emit("error", {"code": error.code, "message": error.message, "param": error.param})
        if self._started:
            failed = response_object(self._state, self._exchange.model_alias, "failed", self._items)
            failed["error"] = {"code": error.code or "server_error", "message": error.message}
            self._emit("response.failed", {"response": failed})
        return self._flush()

    def _emit(self, kind: str, data: dict[str, Any]) -> None:
        self._emit_encoded(kind, orjson.dumps(data))

    def _emit_encoded(self, kind: str, data: bytes) -> None:
        """An event whose fields (a JSON object, not empty) are already encoded."""
        name = kind.encode()
        head = b'event: %s\ndata: {"type":"%s","sequence_number":%d,' % (name, name, self._sequence)
        self._out.append(head + data[1:] + b"\n\n")
        self._sequence += 1

    def _flush(self) -> bytes:
        out = self._out
        if len(out) == 1:
            return out.pop()
        self._out = []
        return b"".join(out)

    def _start(self) -> None:
        self._started = True
        begun = orjson.dumps(
            {"response": response_object(self._state, self._exchange.model_alias, "in_progress", [])}
        )
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
        self._out.append(
            self._delta_head + orjson.dumps(text) + b',"sequence_number":%d}\n\n' % self._sequence
        )
        self._sequence += 1
        self._text.append(text)

    def _where(self) -> dict[str, Any]:
        return {"item_id": self._call["id"], "output_index": len(self._items)}

    def _open(self, kind: str) -> None:
        if self._kind == kind and kind != "function_call":
            return
        if kind != "function_call":
            self._close()
            self._call = {}
        self._kind = kind
        self._text = []
        prefix = {"message": "msg", "reasoning": "rs", "function_call": "fc"}[kind]
        self._call["id"] = item_id = f"{prefix}_{secrets.token_hex(12)}"
        output_index = len(self._items)
        if kind == "message":
            item = {**message_item(item_id, "", "in_progress"), "content": []}
        elif kind == "reasoning":
            item = {**reasoning_item(item_id, ""), "content": [], "status": "in_progress"}
        else:
            item = call_item(item_id, self._call["call_id"], self._call["name"], "", "in_progress")
        self._emit("response.output_item.added", {"output_index": output_index, "item": item})
        delta_kind = _DELTA_EVENTS[kind]
        where: dict[str, Any] = {"type": delta_kind, "item_id": item_id, "output_index": output_index}
        if kind != "function_call":
            where["content_index"] = 0
        if kind == "message":
            where["logprobs"] = []
        self._delta_head = (
            b"event: %s\ndata: %s," % (delta_kind.encode(), orjson.dumps(where)[:-1]) + b'"delta":'
        )
        if kind == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            self._emit(
                "response.content_part.added",
                {"item_id": item_id, "output_index": output_index, "content_index": 0, "part": part},
            )

    def _close(self) -> None:
        kind = self._kind
        if kind is None:
            return
        where = self._where()
        text = "".join(self._text)
        if kind == "message":
            item = message_item(where["item_id"], text)
            self._emit(
                "response.output_text.done", {**where, "content_index": 0, "text": text, "logprobs": []}
            )
            self._emit(
                "response.content_part.done", {**where, "content_index": 0, "part": item["content"][0]}
            )
        elif kind == "reasoning":
            item = reasoning_item(where["item_id"], text)
            self._emit("response.reasoning_text.done", {**where, "content_index": 0, "text": text})
        else:
            call = self._call
            item = call_item(where["item_id"], call["call_id"], call["name"], text)
            self._emit(
                "response.function_call_arguments.done", {**where, "name": call["name"], "arguments": text}
            )
        self._emit("response.output_item.done", {"output_index": where["output_index"], "item": item})
        self._items.append(item)
        self._kind = None
        self._text = []
