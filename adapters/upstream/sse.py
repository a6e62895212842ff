"""Server-sent events from an upstream, as parsed chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from adapters.upstream.http_answers import StreamResponse
from adapters.upstream.http_client import HttpClient
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


MAX_EVENT_BYTES = 16 * 1024 * 1024
"""An event (its data so far and its unfinished line) held at most: past it the stream is
malformed, rather than a buffer that grows for as long as an upstream sends no newline."""


class EventTooLarge(ValueError):
    pass


class SseEvents:
    """The `data` of each event in a body fed in blocks of any size (a block may end anywhere,
    mid-line included); multi-line data joined; other fields and comments skipped."""

    __slots__ = ("_data", "_held", "_max", "_rest")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._data: list[bytes] = []  # the data lines of the event in progress
        self._rest = b""  # an unfinished line
        self._held = 0  # bytes of the event in progress's data lines
        self._max = max_event_bytes

    def feed(self, block: bytes) -> list[bytes]:
        if self._rest:
            block = self._rest + block
        lines = block.split(b"\n")
        self._rest = lines.pop()
        events = self._events(lines)
        if self._held + len(self._rest) > self._max:
            raise EventTooLarge(f"an event longer than {self._max} bytes")
        return events

    def end(self) -> list[bytes]:
        """What the body's end completes: its last line, its last event without a blank line."""
        rest, self._rest = self._rest, b""
        events = self._events([rest]) if rest else []
        if self._data:
            events.append(b"\n".join(self._data))
            self._data = []
            self._held = 0
        return events

    def _events(self, lines: list[bytes]) -> list[bytes]:
        events: list[bytes] = []
        data = self._data
        held = self._held
        for raw_line in lines:
            line = raw_line.rstrip(b"\r")
            if not line:
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data = []
                    held = 0
            elif line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
                held += len(value)
        self._data = data
        self._held = held
        return events


async def sse_batches(blocks: AsyncIterator[bytes]) -> AsyncIterator[list[bytes]]:
    """The `data` of the events each block completes, block by block: the events one read
    brought are handled together (and their chunks relayed in one write, gateway/http_protocol.py)."""
    events = SseEvents()
    async for block in blocks:
        if batch := events.feed(block):
            yield batch
    if batch := events.end():
        yield batch


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
        self._finished = False  # a chunk as the upstream sent it had a finish reason
        self._ready = 0  # chunks of the block in hand not handed out yet

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._chunks()

    def ready(self) -> int:
        """How many more chunks the stream hands out without waiting for the upstream (those
        of the block last read), so that a relay can send them together; 0 at the stream's
        first chunk, which goes out on its own."""
        return self._ready

    async def _chunks(self) -> AsyncIterator[Chunk]:
        batches = sse_batches(self._response.blocks())
        started = False
        try:
            async for batch in batches:
                payloads = batch
                if not started:
                    # The stream's first chunk is handed out before the rest of its block is
                    # parsed: the relay sends it at once, whatever `ready` says (0 here).
                    for position, payload in enumerate(batch):
                        if payload == b"[DONE]":
                            async for _ in batches:  # read to the end so the connection can be reused
                                pass
                            return
                        first = self._chunk(payload)
                        if first is not None:
                            started = True
                            yield first
                            payloads = batch[position + 1 :]
                            break
                    else:
                        continue
                # The block's other chunks are parsed before the next is handed out, so `ready`
                # counts them; a malformed one fails the stream after those before it.
                chunks: list[Chunk] = []
                failed: UpstreamError | None = None
                done = False
                for payload in payloads:
                    if payload == b"[DONE]":
                        done = True
                        break
                    try:
                        chunk = self._chunk(payload)
                    except UpstreamError as exc:
                        failed = exc
                        break
                    if chunk is not None:
                        chunks.append(chunk)
                self._ready = len(chunks)
                for chunk in chunks:
                    self._ready -= 1
                    yield chunk
                if failed is not None:
                    raise failed
                if done:
                    async for _ in batches:  # read to the end so the connection can be reused
                        pass
                    return
        except EventTooLarge:
            raise UpstreamError(
                f"Upstream {self._upstream!r} sent a stream event too large to hold.",
                code="upstream_malformed_chunk",
                upstream=self._upstream,
            ) from None
        if not self._finished:
            raise UpstreamError(
                f"Upstream {self._upstream!r} ended the stream before completing it.",
                code="upstream_incomplete",
                upstream=self._upstream,
            )

    def _chunk(self, payload: bytes) -> Chunk | None:
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise UpstreamError(
                f"Upstream {self._upstream!r} sent a malformed stream chunk.",
                code="upstream_malformed_chunk",
                upstream=self._upstream,
            ) from None
        if not isinstance(data, dict):
            return None
        if "error" in data and "choices" not in data:
            raise UpstreamError(
                f"Upstream {self._upstream!r} reported an error mid-stream.",
                code="upstream_stream_error",
                upstream=self._upstream,
            )
        if not self._finished:
            self._finished = _has_finish_reason(data)
        if self._shape is None:
            return Chunk(payload, data)
        shaped = self._shape(data)
        return None if shaped is None else Chunk(orjson.dumps(shaped), shaped)

    async def aclose(self) -> None:
        self._response.close()


def _has_finish_reason(data: dict[str, Any]) -> bool:
    for choice in data.get("choices") or ():
        if isinstance(choice, dict) and choice.get("finish_reason"):
            return True
    return False
