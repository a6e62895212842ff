"""The one module that sends HTTP requests upstream, on aiohttp.

aiohttp is used directly (not httpx) because it is the transport that keeps a Python
proxy fast on this hardware: see docs/benchmarks.md. Every aiohttp and socket exception
is translated here, in `_translated`, into the gateway's own UpstreamError family.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from multidict import CIMultiDict

from gateway.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable


class RawResponse:
    """A whole answer: its status, body and headers (names lower-cased, made when first read:
    most answers are 200s whose headers nobody reads)."""

    __slots__ = ("_headers", "_received", "body", "status")

    def __init__(self, status: int, received: Mapping[str, str], body: bytes) -> None:
        self.status = status
        self.body = body
        self._received = received
        self._headers: dict[str, str] | None = None

    @property
    def headers(self) -> dict[str, str]:
        if self._headers is None:
            self._headers = _lower(self._received)
        return self._headers


_NO_USER_AGENT: CIMultiDict[None] = CIMultiDict({"User-Agent": None})  # shared, never changed


class _NoUserAgentRequest(aiohttp.ClientRequest):
    """aiohttp's request without the User-Agent header it would add (what the session's
    `skip_auto_headers=("User-Agent",)` does), and without that option's cost: a header
    dict built, sorted and merged for every request (docs/benchmarks.md, "Leases"). aiohttp's
    other default headers (Accept, Accept-Encoding) are added as aiohttp adds them. A request's
    own `skip_auto_headers` is not read: this module passes none."""

    def update_auto_headers(self, skip_auto_headers: Any) -> None:
        self._skip_auto_headers = _NO_USER_AGENT  # what aiohttp reads it for later (payload headers)
        headers = self.headers
        for name, value in self.DEFAULT_HEADERS.items():
            if name not in headers:
                headers[name] = value


class HttpClient:
    """A keep-alive connection pool towards one upstream."""

    def __init__(self, upstream: str, *, max_connections: int, connect_timeout: float) -> None:
        self._upstream = upstream
        self._connect_timeout = connect_timeout
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max_connections, ttl_dns_cache=300),
            # One session serves every tenant: a cookie an upstream sets must not ride along
            # on another tenant's requests.
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=True,
            raise_for_status=False,
            request_class=_NoUserAgentRequest,  # no User-Agent header: see the class
        )

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], seconds: float, head_within: float | None = None
    ) -> RawResponse:
        """POST and read the whole answer within `seconds` (the caller's remaining deadline), its
        head within `head_within` of them: an upstream that hangs fails then, not at the deadline."""
        head_s = seconds if head_within is None else min(head_within, seconds)
        # aiohttp's own timers: `total` for the whole answer, `sock_read` for each wait for
        # bytes, the first of which is the wait for the head (the body of a non-streamed answer
        # follows its head at once).
        timeout = aiohttp.ClientTimeout(total=seconds, connect=self._connect_timeout, sock_read=head_s)
        with self._translated(head_s):
            async with self._session.post(
                url, data=_payload(body), headers=headers, timeout=timeout
            ) as response:
                payload = await response.read()
                return RawResponse(response.status, response.headers, payload)

    async def get(self, url: str, headers: dict[str, str], seconds: float) -> RawResponse:
        timeout = seconds
        with self._translated(timeout):
            async with self._session.get(
                url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)
            ) as response:
                return RawResponse(response.status, response.headers, await response.read())

    async def open_stream(
        self,
        url: str,
        body: bytes,
        headers: dict[str, str],
        first_byte_timeout: float,
        between_chunks_timeout: float,
        head_within: float | None = None,
    ) -> StreamResponse:
        """POST and wait for the response head; the body is then read as it arrives (`blocks`).

        `first_byte_timeout` covers the head and the first bytes of the body together (servers
        send their head at once and the first event after prefill), the head alone also
        `head_within`; `between_chunks_timeout` each later wait for bytes.
        """
        first_by = time.monotonic() + first_byte_timeout
        head_s = first_byte_timeout if head_within is None else min(head_within, first_byte_timeout)
        timeout = aiohttp.ClientTimeout(
            total=None, connect=self._connect_timeout, sock_read=first_byte_timeout
        )
        with self._translated(head_s):
            async with asyncio.timeout(head_s):
                response = await self._session.post(
                    url, data=_payload(body), headers=headers, timeout=timeout
                )
        stream = StreamResponse(response, self, between_chunks_timeout, first_by)
        stream.set_read_timeout(max(first_by - time.monotonic(), 0.001))
        return stream

    def _translated(self, timeout: float) -> _Translated:
        return _Translated(self._upstream, timeout)

    async def aclose(self) -> None:
        await self._session.close()


class _Translated:
    """Every aiohttp and socket exception raised in its block, as the gateway's own
    UpstreamError family (`timeout`: the one the message names). A class rather than a
    generator context manager: it wraps every upstream request."""

    __slots__ = ("_timeout", "_upstream")

    def __init__(self, upstream: str, timeout: float) -> None:
        self._upstream = upstream
        self._timeout = timeout

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if kind is None or not issubclass(kind, Exception) or issubclass(kind, UpstreamError):
            return
        name = self._upstream
        if issubclass(kind, (TimeoutError, aiohttp.ServerTimeoutError)):
            raise UpstreamTimeout(
                f"Upstream {name!r} did not answer within {self._timeout:.1f}s.", upstream=name
            ) from None
        if issubclass(kind, aiohttp.ClientConnectorError):
            raise UpstreamUnavailable(f"Cannot connect to upstream {name!r}.", upstream=name) from None
        if issubclass(kind, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, ConnectionError)):
            raise UpstreamUnavailable(
                f"Upstream {name!r} closed the connection.", code="upstream_disconnected", upstream=name
            ) from None
        if issubclass(kind, aiohttp.ClientPayloadError):
            raise UpstreamError(
                f"Upstream {name!r} sent an incomplete response.", code="upstream_incomplete", upstream=name
            ) from None
        if issubclass(kind, aiohttp.ClientError):
            raise UpstreamError(f"Upstream {name!r} failed.", upstream=name) from None


class StreamResponse:
    def __init__(
        self, response: aiohttp.ClientResponse, client: HttpClient, between: float, first_by: float
    ) -> None:
        self._response = response
        self._client = client
        self._between = between
        self._first_by = first_by  # time.monotonic() by which the first bytes of the body must be in
        self.status = response.status
        self.headers = _lower(response.headers)

    def set_read_timeout(self, seconds: float) -> None:
        """The longest silence allowed from now on (aiohttp's own timer, reset by every packet)."""
        connection = self._response.connection
        protocol = connection.protocol if connection is not None else None
        if protocol is not None:  # None: the whole body is in already
            protocol.read_timeout = seconds
            protocol.start_timeout()

    async def read(self) -> bytes:
        with self._client._translated(self._between):
            return await self._response.read()

    async def blocks(self) -> AsyncIterator[bytes]:
        """The body as it arrives: at each step, everything that is in, in one piece."""
        content = self._response.content
        with self._client._translated(max(self._first_by - time.monotonic(), 0.0)):
            block = await content.readany()
        if not block:
            return
        self.set_read_timeout(self._between)
        yield block
        with self._client._translated(self._between):
            while block := await content.readany():
                yield block

    def close(self) -> None:
        if self._response.content.at_eof():
            self._response.release()  # back to the pool for the next request
        else:
            # Unfinished: dropping the connection is what tells the upstream to stop generating.
            self._response.close()


def _lower(headers: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


# aiohttp writes a bytes body in one piece, and warns past 1 MiB that this may hold the event
# loop; a file-like body is written in chunks. Bodies reach the gateway's 4 MiB limit (long
# histories, images as data URLs).
_ONE_PIECE_MAX = 1024 * 1024


def _payload(body: bytes) -> bytes | io.BytesIO:
    return io.BytesIO(body) if len(body) > _ONE_PIECE_MAX else body
