"""The one module that sends HTTP requests upstream: HTTP/1.1 over keep-alive connections,
on asyncio's transports and httptools (llhttp, the parser of Node.js, also uvicorn's).

Why not a general client: aiohttp's, used before, was the largest single cost of the
gateway's spine, about four times this module's CPU per request measured side by side
(docs/benchmarks.md, "Upstream client"). An upstream call needs little of what a general client
offers, so this module does what the gateway needs and no more:

- a pool of connections per client (one client per upstream), at most `max_connections`
  open, the most recently used first, idle ones dropped after `IDLE_S`;
- bodies delimited by Content-Length, chunked, or the connection's end; gzip and deflate
  decoded (the only encodings it asks for);
- timeouts: the connection's, the head's, each wait for bytes, the whole answer's;
- back-pressure: reading pauses while a stream holds more than `PAUSE_BYTES` unread.

Not done, on purpose: redirects are not followed (an upstream's 3xx reaches its adapter as any
other status: a redirect must not carry an upstream's credentials elsewhere), cookies are
kept nowhere (one pool serves every tenant: a cookie one tenant's answer set must never ride
on another's request), no proxy, no User-Agent. Every failure is raised as the gateway's own
UpstreamError family, the same codes the adapters and the forwarder's retries read.

Callers pass header names lower-case (the adapters do); `accept: */*` and
`accept-encoding: gzip, deflate` are added when missing.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import socket
import ssl
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

import aiohappyeyeballs

from adapters.upstream.http_answers import RawResponse, StreamResponse
from adapters.upstream.http_connection import PAUSE_BYTES, Connection, Failure, decoded
from gateway.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable

IDLE_S = 15.0
"""An idle connection older than this is closed rather than reused (servers close theirs
after 5 to 75 s; one they closed is noticed as soon as its end arrives)."""

_HAPPY_EYEBALLS_S = 0.25  # the head start one address family gets over the next (aiohttp's too)
_TARGETS_KEPT = 256  # parsed URLs remembered per client (an adapter has a handful)
_ACCEPT = "accept: */*\r\n"
_ACCEPT_ENCODING = "accept-encoding: gzip, deflate\r\n"


class _Target(NamedTuple):
    """Where a URL's requests go, and the parts of their head that never change."""

    key: tuple[str, int, bool]  # host, port, TLS: connections are pooled by it
    host: str
    port: int
    tls: bool
    post_head: str  # request line and Host (and Authorization from the URL's user info)
    get_head: str


def _target(url: str) -> _Target:
    parts = urlsplit(url)
    try:
        given_port = parts.port
    except ValueError:
        given_port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or given_port == -1:
        raise UpstreamError(f"Cannot send a request to {url!r}: not an http(s) URL.")
    tls = parts.scheme == "https"
    port = given_port or (443 if tls else 80)
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    if given_port is not None and given_port != (443 if tls else 80):
        shown = f"{shown}:{port}"
    path = ((parts.path or "/") + (f"?{parts.query}" if parts.query else "")).replace(" ", "%20")
    fixed = f"host: {shown}\r\n"
    if parts.username is not None:
        secret = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        fixed += f"authorization: Basic {base64.b64encode(secret).decode()}\r\n"
    return _Target(
        (host, port, tls),
        host,
        port,
        tls,
        f"POST {path} HTTP/1.1\r\n{fixed}",
        f"GET {path} HTTP/1.1\r\n{fixed}",
    )


def _head(start: str, headers: dict[str, str], body: bytes | None) -> bytes:
    lines = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
    # A name or value with a line break would start a header (or a request) of its own.
    if lines.count("\n") != len(headers) or lines.count("\r") != len(headers):
        raise UpstreamError("A header for the upstream contained a line break; the request was not sent.")
    if "accept" not in headers:
        lines += _ACCEPT
    if "accept-encoding" not in headers:
        lines += _ACCEPT_ENCODING
    if body is not None:
        lines += f"content-length: {len(body)}\r\n"
    return f"{start}{lines}\r\n".encode()


class HttpClient:
    """A keep-alive connection pool towards one upstream."""

    def __init__(self, upstream: str, *, max_connections: int, connect_timeout: float) -> None:
        self._upstream = upstream
        self._connect_timeout = connect_timeout
        self._limit = max(max_connections, 1)
        self._open = 0
        self._idle: dict[tuple[str, int, bool], list[Connection]] = {}
        self._all: set[Connection] = set()
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._targets: dict[str, _Target] = {}
        self._tls: ssl.SSLContext | None = None
        self._closed = False

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], seconds: float, head_within: float | None = None
    ) -> RawResponse:
        """POST and read the whole answer within `seconds` (the caller's remaining deadline), its
        head within `head_within` of them: an upstream that hangs fails then, not at the deadline;
        each later wait for bytes is bounded by the same."""
        head_s = seconds if head_within is None else min(head_within, seconds)
        target = self._target_of(url)
        head = _head(target.post_head, headers, body)
        return await self._whole(target, head, body, seconds, head_s)

    async def get(self, url: str, headers: dict[str, str], seconds: float) -> RawResponse:
        target = self._target_of(url)
        return await self._whole(target, _head(target.get_head, headers, None), None, seconds, seconds)

    async def _whole(
        self, target: _Target, head: bytes, body: bytes | None, seconds: float, head_s: float
    ) -> RawResponse:
        conn = self._idle_connection(target)
        if conn is None:
            deadline = asyncio.get_running_loop().time() + seconds
            conn = await self._connection(target, deadline, head_s)
        else:
            deadline = conn.now() + seconds
        loop_time = conn.now
        try:
            conn.send(head, body)
            parts: list[bytes] = []  # a large body's first parts, taken so reading never pauses
            while not conn.complete:
                if conn.failure is not None:
                    raise conn.failure
                if conn.buffered > PAUSE_BYTES:
                    parts.append(conn.take())
                await conn.wait(min(head_s, deadline - loop_time()))
            data = conn.take()
            if parts:
                data = b"".join([*parts, data])
            data = decoded(conn.headers, data)
            response = RawResponse(conn.status, conn.headers, data)
        except BaseException as exc:
            conn.close()
            raise self._translated(exc, head_s) from None
        self._release(conn)
        return response

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
        head_s = first_byte_timeout if head_within is None else min(head_within, first_byte_timeout)
        target = self._target_of(url)
        conn = self._idle_connection(target)
        if conn is None:
            now = asyncio.get_running_loop().time()
            conn = await self._connection(target, now + head_s, head_s)
        else:
            now = conn.now()
        first_by, head_by = now + first_byte_timeout, now + head_s
        loop_time = conn.now
        try:
            conn.send(_head(target.post_head, headers, body), body)
            while not conn.head_done:
                if conn.failure is not None:
                    raise conn.failure
                await conn.wait(head_by - loop_time())
        except BaseException as exc:
            conn.close()
            raise self._translated(exc, head_s) from None
        stream = StreamResponse(conn, between_chunks_timeout, first_by, self._release, self._translated)
        stream.set_read_timeout(max(first_by - loop_time(), 0.001))
        return stream

    def _target_of(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            target = _target(url)
            if len(self._targets) < _TARGETS_KEPT:
                self._targets[url] = target
        return target

    async def _connection(self, target: _Target, deadline: float, head_s: float) -> Connection:
        """An idle connection to the target, or a new one when the limit allows; else the
        first to come free, waited for until `deadline`."""
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                raise UpstreamUnavailable(
                    f"Upstream {self._upstream!r}: the client is closed.", upstream=self._upstream
                )
            conn = self._idle_connection(target)
            if conn is not None:
                return conn
            if self._open >= self._limit:
                self._close_an_idle_one()
            if self._open < self._limit:
                return await self._connect(target, deadline, head_s)
            waiter = loop.create_future()
            self._slot_waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except BaseException as exc:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken as this request gave up: the slot goes to the next
                raise self._timeout(head_s) if isinstance(exc, TimeoutError) else exc from None
            finally:
                if not waiter.done():
                    waiter.cancel()
                _discard(self._slot_waiters, waiter)

    def _idle_connection(self, target: _Target) -> Connection | None:
        """A usable idle connection to the target (the stale ones on the way closed), or None."""
        if self._closed:
            return None
        idle = self._idle.get(target.key)
        while idle:
            conn = idle.pop()
            if conn.usable() and conn.now() - conn.idle_since < IDLE_S:
                return conn
            conn.close()
        return None

    async def _connect(self, target: _Target, deadline: float, head_s: float) -> Connection:
        loop = asyncio.get_running_loop()
        self._open += 1
        try:
            tls = self._tls_context() if target.tls else None
            async with asyncio.timeout_at(min(deadline, loop.time() + self._connect_timeout)):
                # Every address the name has, IPv6 and IPv4 raced as aiohttp does (RFC 8305):
                # an unreachable family costs a quarter of a second, not the connect timeout.
                addresses = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
                sock = await aiohappyeyeballs.start_connection(
                    addresses, happy_eyeballs_delay=_HAPPY_EYEBALLS_S, interleave=1
                )
                try:
                    _, conn = await loop.create_connection(
                        lambda: Connection(target.key, self._forget),
                        sock=sock,
                        ssl=tls,
                        server_hostname=target.host if tls is not None else None,
                    )
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError:
            self._slot_freed()
            raise self._timeout(head_s) from None
        except OSError:
            self._slot_freed()
            raise self._unreachable() from None
        except BaseException:
            self._slot_freed()
            raise
        if conn.closed:  # gone before it could be used
            self._slot_freed()
            raise self._unreachable()
        conn.counted = True
        self._all.add(conn)
        return conn

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def _close_an_idle_one(self) -> None:
        """At the limit with idle connections to other targets: the oldest of them goes."""
        oldest: Connection | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since < oldest.idle_since):
                oldest = idle[0]
        if oldest is not None:
            oldest.close()

    def _release(self, conn: Connection) -> None:
        if not conn.reusable() or self._closed:
            conn.close()
            return
        conn.busy = False
        conn.idle_since = conn.now()
        self._idle.setdefault(conn.key, []).append(conn)
        self._wake_one()

    def _forget(self, conn: Connection) -> None:
        """A connection closed (by either side): out of the pool and the count."""
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)
        if conn.counted:
            conn.counted = False
            self._all.discard(conn)
            self._slot_freed()

    def _slot_freed(self) -> None:
        self._open -= 1
        self._wake_one()

    def _wake_one(self) -> None:
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _unreachable(self) -> UpstreamUnavailable:
        return UpstreamUnavailable(f"Cannot connect to upstream {self._upstream!r}.", upstream=self._upstream)

    def _timeout(self, seconds: float) -> UpstreamTimeout:
        return UpstreamTimeout(
            f"Upstream {self._upstream!r} did not answer within {seconds:.1f}s.", upstream=self._upstream
        )

    def _translated(self, exc: BaseException, timeout: float) -> BaseException:
        """An exception of a request in progress, as the gateway's own UpstreamError family
        (`timeout`: the one the message names); any other (a cancellation) as it is."""
        name = self._upstream
        if isinstance(exc, UpstreamError):
            return exc
        if isinstance(exc, TimeoutError):
            return self._timeout(timeout)
        if isinstance(exc, Failure) and exc.kind == "incomplete":
            return UpstreamError(
                f"Upstream {name!r} sent an incomplete response.", code="upstream_incomplete", upstream=name
            )
        if isinstance(exc, Failure) and exc.kind != "disconnected":
            return UpstreamError(f"Upstream {name!r} sent a malformed response.", upstream=name)
        if isinstance(exc, (Failure, OSError)):  # disconnected
            return UpstreamUnavailable(
                f"Upstream {name!r} closed the connection.", code="upstream_disconnected", upstream=name
            )
        return exc

    async def aclose(self) -> None:
        self._closed = True
        for conn in list(self._all):
            conn.close()
        self._idle.clear()
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)


def _discard(waiters: collections.deque[asyncio.Future[None]], waiter: asyncio.Future[None]) -> None:
    with contextlib.suppress(ValueError):  # already taken off by the one who woke it
        waiters.remove(waiter)
