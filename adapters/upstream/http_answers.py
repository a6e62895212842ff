"""What the upstream client (`http_client.py`) hands back: a whole answer, or a streamed one
whose body is read as it arrives."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from adapters.upstream.http_connection import Connection, decode, decoder_for, lower_headers


class _Headed:
    """An answer's headers as received, as a dict with lower-cased names made when first read
    (most answers are 200s whose headers nobody reads)."""

    __slots__ = ("_headers", "_received")
    _received: list[tuple[bytes, bytes]]
    _headers: dict[str, str] | None

    @property
    def headers(self) -> dict[str, str]:
        if self._headers is None:
            self._headers = lower_headers(self._received)
        return self._headers


class RawResponse(_Headed):
    """A whole answer: its status, body and headers."""

    __slots__ = ("body", "status")

    def __init__(self, status: int, received: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status = status
        self.body = body
        self._received = received
        self._headers = None


class StreamResponse(_Headed):
    """A streamed answer whose head is in: its status and headers, and its body as it comes."""

    def __init__(
        self,
        conn: Connection,
        between: float,
        first_by: float,
        release: Callable[[Connection], None],
        translated: Callable[[BaseException, float], BaseException],
    ) -> None:
        self._closed = False
        self._conn = conn
        self._release = release  # the connection back to its pool
        self._translated = translated  # a failure as the gateway's UpstreamError family
        self._between = between
        self._first_by = first_by  # loop time by which the first bytes of the body must be in
        self._read_timeout = between
        self._decoder = decoder_for(conn.headers)
        self.status = conn.status
        self._received = conn.headers
        self._headers = None

    def set_read_timeout(self, seconds: float) -> None:
        """The longest silence allowed from now on."""
        self._read_timeout = seconds

    async def _next(self) -> bytes:
        """The body's next bytes, all that is in; b"" at its end."""
        conn = self._conn
        timeout = self._read_timeout
        try:
            while True:
                if conn.chunks:
                    data = conn.take()
                    if self._decoder is not None:
                        data = decode(self._decoder, data, final=False)
                        if not data:
                            continue
                    return data
                if conn.complete:
                    if self._decoder is not None and (rest := decode(self._decoder, b"", final=True)):
                        return rest
                    return b""
                if conn.failure is not None:
                    raise conn.failure
                await conn.wait(timeout)
        except BaseException as exc:
            conn.close()
            raise self._translated(exc, timeout) from None

    async def read(self) -> bytes:
        self._read_timeout = self._between
        parts = []
        while block := await self._next():
            parts.append(block)
        return b"".join(parts)

    async def blocks(self) -> AsyncIterator[bytes]:
        """The body as it arrives: at each step, everything that is in, in one piece."""
        self._read_timeout = max(self._first_by - self._conn.now(), 0.0)
        block = await self._next()
        if not block:
            return
        self.set_read_timeout(self._between)
        yield block
        while block := await self._next():
            yield block

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        conn = self._conn
        if conn.complete and not conn.chunks:
            self._release(conn)  # back to the pool for the next request
        else:
            # Unfinished: dropping the connection is what tells the upstream to stop generating.
            conn.close()

    def __del__(self) -> None:
        # A stream dropped without close() must not hold a slot of the pool for good.
        if not self._closed:
            self._closed = True
            self._conn.close()
