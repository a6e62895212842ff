"""Server-sent events from an upstream, as parsed chunks: the async generators that read them
(plain Python: mypyc compiles no async generator), around the compiled parsing of
adapters/upstream/sse_events.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from adapters.upstream.http_answers import StreamResponse
from adapters.upstream.http_client import HttpClient
from adapters.upstream.sse_events import ChunkDecoder, ChunkShaper, EventTooLarge, SseEvents
from gateway.errors import UpstreamError
from gateway.ports import Chunk, UpstreamRequest

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
        self._decoder = ChunkDecoder(upstream, shape)
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
        decode = self._decoder.decode
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
                        first = decode(payload)
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
                        chunk = decode(payload)
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
        if not self._decoder.finished:
            raise UpstreamError(
                f"Upstream {self._upstream!r} ended the stream before completing it.",
                code="upstream_incomplete",
                upstream=self._upstream,
            )

    async def aclose(self) -> None:
        self._response.close()
