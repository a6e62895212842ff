"""The tool-call guard: model-emitted tool calls the decision does not allow never reach
the client.

Non-streamed, a blocked call is removed from `message.tool_calls` (the key goes when none
remain, and `finish_reason` becomes "content_filter"), and a line per blocked call is
appended to `message.content`:

    [tollgate] tool call 'fetch_url' blocked by policy: argument 'url': host 'evil.example' is not allowed

Streamed, see `gateway.tools.stream`. Each blocked call is logged (warning, with the request
id, tool and reason) and counted on the exchange and on the guard.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from gateway.exchange import Exchange
from gateway.policy.decision import Decision
from gateway.ports import Chunk
from gateway.tools.call_check import BlockedCall, check_call
from gateway.tools.stream import ToolCallStream

logger = logging.getLogger("tollgate.tools")


class ToolCallGuard:
    def __init__(self) -> None:
        self.blocked_total = 0  # since start, for metrics

    def on_response(self, exchange: Exchange, body: dict[str, Any]) -> None:
        decision = exchange.decision
        if decision is None:
            return
        for choice in _dicts(body.get("choices")):
            message = choice.get("message")
            if isinstance(message, dict):
                self._filter_message(exchange, decision, choice, message)

    def on_chunk(self, exchange: Exchange, chunk: Chunk) -> list[Chunk]:
        decision = exchange.decision
        if decision is None:
            return [chunk]
        stream = exchange.tool_stream
        if stream is None:
            stream = exchange.tool_stream = ToolCallStream(decision)
        out = stream.feed(chunk)
        for blocked in stream.take_blocked():
            self._record(exchange, blocked)
        return out

    def on_end(self, exchange: Exchange) -> list[Chunk]:
        stream = exchange.tool_stream
        if stream is None:
            return []
        out = stream.end()
        for blocked in stream.take_blocked():
            self._record(exchange, blocked)
        return out

    def _filter_message(
        self, exchange: Exchange, decision: Decision, choice: dict[str, Any], message: dict[str, Any]
    ) -> None:
        notes: list[str] = []
        if message.get("function_call") is not None:
            del message["function_call"]
            legacy = BlockedCall("function_call", "legacy function_call responses are not allowed")
            notes.append(self._record(exchange, legacy))
        calls = message.get("tool_calls")
        kept: list[Any] = []
        for call in calls if isinstance(calls, list) else ():
            name, arguments = _name_and_arguments(call)
            reason = check_call(decision, name, arguments)
            if reason is None:
                kept.append(call)
            else:
                notes.append(self._record(exchange, BlockedCall(name, reason)))
        if not notes:
            return
        if kept:
            message["tool_calls"] = kept
        else:
            message.pop("tool_calls", None)
            choice["finish_reason"] = "content_filter"
        content = message.get("content")
        text = "\n".join(notes)
        message["content"] = f"{content}\n{text}" if isinstance(content, str) and content else text

    def _record(self, exchange: Exchange, blocked: BlockedCall) -> str:
        exchange.tool_calls_blocked += 1
        self.blocked_total += 1
        logger.warning(
            "tool call blocked",
            extra={"request_id": exchange.request_id, "tool": blocked.name, "reason": blocked.reason},
        )
        return blocked.note()


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _name_and_arguments(call: Any) -> tuple[str, str]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return "", ""
    name = function.get("name")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        # Some servers send the arguments as an object; check what the client will get.
        arguments = orjson.dumps(arguments).decode() if isinstance(arguments, dict) else ""
    return (name if isinstance(name, str) else ""), arguments
