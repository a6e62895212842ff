"""Server-sent events parsed: the `data` of each event in a body read in blocks, and each
event's chunk decoded. Compiled with the request path (every event of every stream passes
here); the async generators that drive them stay in adapters/upstream/sse.py, plain, since
mypyc compiles no async generator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gateway.chunk_shapes import Chunk
from gateway.errors import UpstreamError

ChunkShaper = Callable[[dict[str, Any]], dict[str, Any] | None]

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
        rest = self._rest
        self._rest = b""
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


class ChunkDecoder:
    """Each event's `chat.completion.chunk` of one upstream stream, and whether a chunk as the
    upstream sent it had a finish reason (`finished`: a stream that ends without [DONE] and
    without one was cut short). `shape` lets an adapter turn a vendor's chunk into the OpenAI
    shape (or drop it by returning None)."""

    def __init__(self, upstream: str, shape: ChunkShaper | None = None) -> None:
        self.upstream = upstream
        self.shape = shape
        self.finished = False

    def decode(self, payload: bytes) -> Chunk | None:
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise UpstreamError(
                f"Upstream {self.upstream!r} sent a malformed stream chunk.",
                code="upstream_malformed_chunk",
                upstream=self.upstream,
            ) from None
        if not isinstance(data, dict):
            return None
        if "error" in data and "choices" not in data:
            raise UpstreamError(
                f"Upstream {self.upstream!r} reported an error mid-stream.",
                code="upstream_stream_error",
                upstream=self.upstream,
            )
        if not self.finished:
            self.finished = _has_finish_reason(data)
        shape = self.shape
        if shape is None:
            return Chunk(payload, data)
        shaped = shape(data)
        return None if shaped is None else Chunk(orjson.dumps(shaped), shaped)


def _has_finish_reason(data: dict[str, Any]) -> bool:
    for choice in data.get("choices") or ():
        if isinstance(choice, dict) and choice.get("finish_reason"):
            return True
    return False
