"""Response guards: the way back through the pipeline.

A guard sees a non-streamed body once, or a stream chunk by chunk; it may change,
hold back or drop chunks, and release what it held when the stream ends. Later guards
(tool calls, output redaction) plug in beside the usage guard.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import orjson

from gateway.errors import GatewayError
from gateway.exchange import Endpoint, Exchange, Usage
from gateway.metering.counted import settle_usage
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
    gateway asked for on the client's behalf when the client did not ask for it.

    When the upstream reports no usage, the client still gets it in OpenAI's format, from the
    gateway's own count: in the body of a non-streamed answer, and in a last usage chunk of a
    stream whose client asked for one (`stream_options.include_usage`)."""

    def on_response(self, exchange: Exchange, body: dict[str, Any]) -> None:
        usage = body.get("usage")
        if isinstance(usage, dict):
            exchange.usage = Usage.from_openai(usage)
        else:
            body["usage"] = openai_usage(settle_usage(exchange), exchange.endpoint)
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
        if exchange.usage.reported:
            return []
        usage = settle_usage(exchange)
        if not exchange.client_wants_usage:
            return []
        data = {
            "id": f"chatcmpl-{exchange.request_id}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": exchange.response_model or exchange.model_alias,
            "choices": [],
            "usage": openai_usage(usage, exchange.endpoint),
        }
        return [Chunk(orjson.dumps(data), data)]


def openai_usage(usage: Usage, endpoint: Endpoint) -> dict[str, int]:
    if endpoint is Endpoint.EMBEDDINGS:
        return {"prompt_tokens": usage.prompt_tokens, "total_tokens": usage.prompt_tokens}
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }
