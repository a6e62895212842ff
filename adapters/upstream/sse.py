"""Server-sent events from an upstream, as parsed chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from adapters.upstream.http_client import HttpClient, StreamResponse
from gateway.errors import UpstreamError
from gateway.ports import Chunk, UpstreamRequest

ChunkShaper = Callable[[dict[str, Any]], dict[str, Any] | None]
ErrorOf = Callable[[int, bytes, dict[str, str]], UpstreamError]


async def open_event_stream(
    client: HttpClient,
    url: str,
    body: bytes,
    headers: dict[str, str],
    request: UpstreamRequest,
    between_chunks_s: float,
    error_of: ErrorOf,
) -> StreamResponse:
    """The upstream's answer to a streamed request, once it says 200; else its error, raised."""
    response = await client.open_stream(
        url, body, headers, request.first_byte_timeout, between_chunks_s, request.headers_timeout
    )
    if response.status != 200:
        try:
            answer = await response.read()
        finally:
            response.close()
        raise error_of(response.status, answer, response.headers)
    return response


async def sse_data(lines: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The `data` of each event, multi-line data joined; other fields and comments skipped."""
    data: list[bytes] = []
    async for raw_line in lines:
        line = raw_line.rstrip(b"\r\n")
        if not line:
            if data:
                yield data[0] if len(data) == 1 else b"\n".join(data)
                data = []
        elif line.startswith(b"data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(b" ") else value)
    if data:
        yield b"\n".join(data)


class SseChunkStream:
    """An upstream stream of OpenAI `chat.completion.chunk` events, ending at [DONE].

    `shape` lets an adapter turn a vendor's chunk into the OpenAI shape (or drop it by
    returning None). A stream that ends without [DONE] and without a finish reason was
    cut short, and is reported as an error rather than passed off as complete.
    """

    def __init__(self, response: StreamResponse, upstream: str, shape: ChunkShaper | None = None) -> None:
        self._response = response
        self._upstream = upstream
        self._shape = shape

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[Chunk]:
        finished = False
        events = sse_data(self._response.lines())
        async for payload in events:
            if payload == b"[DONE]":
                async for _ in events:  # read to the end so the connection can be reused
                    pass
                return
            try:
                data = orjson.loads(payload)
            except orjson.JSONDecodeError:
                raise UpstreamError(
                    f"Upstream {self._upstream!r} sent a malformed stream chunk.",
                    code="upstream_malformed_chunk",
                    upstream=self._upstream,
                ) from None
            if not isinstance(data, dict):
                continue
            if "error" in data and "choices" not in data:
                raise UpstreamError(
                    f"Upstream {self._upstream!r} reported an error mid-stream.",
                    code="upstream_stream_error",
                    upstream=self._upstream,
                )
            if self._shape is not None:
                shaped = self._shape(data)
                if shaped is None:
                    continue
                chunk = Chunk(orjson.dumps(shaped), shaped)
            else:
                chunk = Chunk(payload, data)
            if not finished:
                finished = _has_finish_reason(data)
            yield chunk
        if not finished:
            raise UpstreamError(
                f"Upstream {self._upstream!r} ended the stream before completing it.",
                code="upstream_incomplete",
                upstream=self._upstream,
            )

    async def aclose(self) -> None:
        self._response.close()


def _has_finish_reason(data: dict[str, Any]) -> bool:
    for choice in data.get("choices") or ():
        if isinstance(choice, dict) and choice.get("finish_reason"):
            return True
    return False
