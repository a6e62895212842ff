"""One keep-alive HTTP/1.1 connection to an upstream (an asyncio protocol fed to httptools'
parser), and the decoding of the bodies it brings: the wire half of `http_client.py`.

A connection carries one request at a time. Its answer is collected as it arrives: the
status and headers, the body's pieces not taken yet, whether it is complete, or how it
failed; the client awaits `wait` between looks. Reading pauses while more than
`PAUSE_BYTES` of body wait to be taken, so a slow reader holds a bounded buffer.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import cast

import httptools

PAUSE_BYTES = 256 * 1024
"""Unread body a connection holds before it stops reading from the socket."""

_ONE_WRITE_MAX = 64 * 1024  # a head and a body up to this size are sent joined, in one write


class Failure(Exception):
    """How a connection failed, for the client to raise as an UpstreamError."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind  # "disconnected", "incomplete" or "malformed"


class Connection(asyncio.Protocol):
    """One keep-alive connection and the answer in progress on it (one at a time)."""

    def __init__(self, key: tuple[str, int, bool], on_closed: Callable[[Connection], None]) -> None:
        self.key = key
        self._on_closed = on_closed  # the pool's: out of its idle list and its count
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.counted = False  # in the client's count of open connections (once connected)
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.complete = False
        self.failure: Failure | None = None
        self.chunks: list[bytes] = []
        self.buffered = 0
        self.sized = False  # Content-Length or chunked: the body does not end with the connection
        self.keep_alive = False
        self.busy = False

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if not self.busy or self.complete:  # nothing asked for: a server talking out of turn
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            self.failure = Failure("malformed")
            self.close()
            self._wake()

    def eof_received(self) -> bool:
        return False  # the transport closes itself; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._on_closed(self)
        if self.busy and not self.complete and self.failure is None:
            if self.head_done and not self.sized:
                self.complete = True  # a body delimited by the connection's end
            else:
                self.failure = Failure("incomplete" if self.head_done else "disconnected")
        self._wake()

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))
        lowered = name.lower()
        if lowered == b"content-length" or (lowered == b"transfer-encoding" and b"chunked" in value.lower()):
            self.sized = True

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer: the real one follows
            self.headers = []
            self.sized = False
            return
        self.status = status
        self.head_done = True
        if status in (204, 304):
            self.sized = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > PAUSE_BYTES and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.head_done:
            self.complete = True
            self.keep_alive = self._parser.should_keep_alive()  # read now: the parser resets after
            self._wake()

    # the client's side

    def send(self, head: bytes, body: bytes | None) -> None:
        assert self.transport is not None
        self._reset()
        self.busy = True
        if body is None:
            self.transport.write(head)
        elif len(body) <= _ONE_WRITE_MAX:
            self.transport.write(head + body)
        else:
            self.transport.writelines((head, body))

    def take(self) -> bytes:
        """The body that is in, handed over (reading resumes if it had paused)."""
        chunks = self.chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self.chunks = []
        self.buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def wait(self, seconds: float) -> None:
        """Until something arrives (or the connection ends); TimeoutError after `seconds`."""
        waiter = self._waiter = self._loop.create_future()
        timer = self._loop.call_later(max(seconds, 0.0), _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def now(self) -> float:
        """The time on its loop's clock (the loop it was made in), looked up for nothing:
        Python 3.11's `asyncio.get_running_loop` makes a `getpid` system call each time."""
        return self._loop.time()

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.closed

    def usable(self) -> bool:
        """Idle and still open as far as this side knows (a close in flight may not be in yet)."""
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()
        self._on_closed(self)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


def lower_headers(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in headers}


def _encoding(headers: list[tuple[bytes, bytes]]) -> bytes:
    for name, value in headers:
        if len(name) == 16 and name.lower() == b"content-encoding":
            return value.strip().lower()
    return b""


class _Inflater:
    """gzip or deflate, as it arrives (deflate: zlib-wrapped, or raw as some servers send)."""

    __slots__ = ("_raw_tried", "_zlib")

    def __init__(self, encoding: bytes) -> None:
        self._zlib = zlib.decompressobj(wbits=31 if encoding in (b"gzip", b"x-gzip") else 15)
        self._raw_tried = encoding not in (b"deflate",)

    def feed(self, data: bytes, final: bool) -> bytes:
        try:
            out = self._zlib.decompress(data)
        except zlib.error:
            if self._raw_tried:
                raise
            self._raw_tried = True
            self._zlib = zlib.decompressobj(wbits=-15)
            out = self._zlib.decompress(data)
        self._raw_tried = True
        return out + self._zlib.flush() if final else out


def decoder_for(headers: list[tuple[bytes, bytes]]) -> _Inflater | None:
    encoding = _encoding(headers)
    if encoding in (b"gzip", b"x-gzip", b"deflate"):
        return _Inflater(encoding)
    return None


def decode(decoder: _Inflater, data: bytes, final: bool) -> bytes:
    try:
        return decoder.feed(data, final)
    except zlib.error:
        raise Failure("incomplete") from None


def decoded(headers: list[tuple[bytes, bytes]], data: bytes) -> bytes:
    decoder = decoder_for(headers)
    return data if decoder is None else decode(decoder, data, final=True)
