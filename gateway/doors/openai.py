"""The OpenAI doors (`/v1/chat/completions`, `/v1/embeddings`): the internal request is their
own body, so nothing is translated; answers and errors are OpenAI's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.errors import GatewayError
from gateway.exchange import Endpoint, Exchange
from gateway.ports import Chunk

DONE_EVENT = b"data: [DONE]\n\n"


class OpenAIStream:
    """Chunks as OpenAI's server-sent events, `data: [DONE]` at the end."""

    __slots__ = ()

    def chunk(self, chunk: Chunk) -> bytes:
        return b"data: " + chunk.encoded() + b"\n\n"

    async def done(self) -> bytes:
        return DONE_EVENT

    def error(self, error: GatewayError) -> bytes:
        return b"data: " + error.body_bytes() + b"\n\n"


OPENAI_STREAM = OpenAIStream()


def openai_error(error: GatewayError) -> tuple[int, bytes]:
    return error.status, error.body_bytes()


class OpenAIDoor:
    job_prefix = "job"

    def __init__(self, path: str, endpoint: Endpoint) -> None:
        self.path = path
        self.endpoint = endpoint
        self.api = endpoint.value

    def credential(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("authorization")

    async def request(self, body: dict[str, Any], exchange: Exchange) -> dict[str, Any]:
        return body

    async def response(self, exchange: Exchange, body: dict[str, Any]) -> bytes:
        return orjson.dumps(body)

    def stream(self, exchange: Exchange) -> OpenAIStream:
        return OPENAI_STREAM

    def error(self, error: GatewayError) -> tuple[int, bytes]:
        return openai_error(error)

    def job_state(self, exchange: Exchange) -> dict[str, Any] | None:
        return None

    def resume(self, exchange: Exchange, state: dict[str, Any] | None) -> None:
        return None
