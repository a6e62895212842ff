"""Response guards: the way back through the pipeline.

A guard sees a non-streamed body once, or a stream chunk by chunk; it may change,
hold back or drop chunks, and release what it held when the stream ends. Later guards
(tool calls, output redaction) plug in beside the usage guard.
"""

from __future__ import annotations

from typing import Any, Protocol

from gateway.errors import GatewayError
from gateway.exchange import Exchange, Usage
from gateway.ports import Chunk


class ResponseGuard(Protocol):
    def on_response(self, exchange: Exchange, body: dict[str, Any]) -> None: ...

    def on_chunk(self, exchange: Exchange, chunk: Chunk) -> list[Chunk]: ...

    def on_end(self, exchange: Exchange) -> list[Chunk]: ...


class ErrorGuard(Protocol):
    """Sees the text of an upstream's error before the client does (an upstream's message may
    quote the request); may rewrite `error.message` in place, or raise a GatewayError instead."""

    def on_error(self, exchange: Exchange, error: GatewayError) -> None: ...


class UsageGuard:
    """Records usage, the response model and finish reasons; hides the usage chunk the
    gateway asked for on the client's behalf when the client did not ask for it."""

    def on_response(self, exchange: Exchange, body: dict[str, Any]) -> None:
        usage = body.get("usage")
        if isinstance(usage, dict):
            exchange.usage = Usage.from_openai(usage)
        model = body.get("model")
        if isinstance(model, str):
            exchange.response_model = model
        for choice in body.get("choices") or ():
            if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str):
                exchange.finish_reasons.append(choice["finish_reason"])

    def on_chunk(self, exchange: Exchange, chunk: Chunk) -> list[Chunk]:
        data = chunk.data
        if exchange.response_model is None and isinstance(data.get("model"), str):
            exchange.response_model = data["model"]
        choices = data.get("choices")
        if choices:
            for choice in choices:
                if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str):
                    exchange.finish_reasons.append(choice["finish_reason"])
        usage = data.get("usage")
        if isinstance(usage, dict):
            exchange.usage = Usage.from_openai(usage)
            if not exchange.client_wants_usage:
                if not choices:
                    return []
                del data["usage"]
                chunk.dirty = True
        elif "usage" in data and not exchange.client_wants_usage:
            # Some servers send "usage": null on every chunk once usage is requested.
            del data["usage"]
            chunk.dirty = True
        return [chunk]

    def on_end(self, exchange: Exchange) -> list[Chunk]:
        return []
