"""The Redis store's connection: one pipelined RESP connection per process, hiredis parsing.

redis-py's asyncio client costs about 110 µs of CPU per command here (connection pool
checkout, its lock, command packing in Python, stream reader, retry wrapper); this costs
about 25 µs (one EVALSHA round trip, process_time, uvloop, on the 2-core dev VM).
Commands are written on one connection in the
order they are made and Redis answers in that order, so each reply resolves the oldest
pending future. A command made while none is in flight is written at once (a lone call
waits for nothing); those made while others are in flight are gathered and written
together at the end of the event-loop turn, so under load many requests share one write
and one read (auto-pipelining).

Failures are StateStoreUnavailable for every command waiting on the connection: a
connection closed or reset, no reply within the timeout (the connection is then dropped,
since a late reply would answer the wrong command), a protocol error. The next command
opens a fresh connection. A command is never sent twice: one that may have reached Redis
fails rather than risk being applied twice (its StateStoreUnavailable says
`may_have_applied`, for the caller to compensate). An error reply is returned as a
`hiredis.ReplyError` value, for the caller to judge (`Script` reloads a script Redis no
longer knows).

URLs: `redis://[[user]:password@]host[:port][/db]`, `rediss://` (TLS, verified unless
`ssl_cert_reqs=none`; `ssl_ca_certs=<file>`), `unix://[[user]:password@]/path[?db=n]`.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, cast

import hiredis
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection, parse_url

from gateway.errors import StateStoreUnavailable

ReplyError = hiredis.ReplyError
_URL_OPTIONS = frozenset(("host", "port", "db", "username", "password", "path", "connection_class"))
_TLS_OPTIONS = frozenset(("ssl_cert_reqs", "ssl_ca_certs"))


class Script:
    """A Lua script, called by its SHA-1; sent whole when Redis does not know it (it
    restarted, or its script cache was flushed)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()


class RedisWire:
    def __init__(self, url: str, timeout_s: float) -> None:
        options = parse_url(url)
        unknown = set(options) - _URL_OPTIONS - _TLS_OPTIONS
        if unknown:
            raise ValueError(f"state.redis_url: option(s) not supported: {', '.join(sorted(unknown))}")
        self._url, self._timeout_s = url, timeout_s
        self._path: str | None = options.get("path")
        self._host: str = options.get("host", "localhost")
        self._port = int(options.get("port", 6379))
        self._db = int(options.get("db", 0))
        self._username: str | None = options.get("username")
        self._password: str | None = options.get("password")
        self._ssl: ssl.SSLContext | None = None
        if options.get("connection_class") is SSLConnection:
            self._ssl = ssl.create_default_context(cafile=_optional_str(options.get("ssl_ca_certs")))
            if str(options.get("ssl_cert_reqs", "required")).lower() == "none":
                self._ssl.check_hostname = False
                self._ssl.verify_mode = ssl.CERT_NONE
        elif options.get("connection_class") is UnixDomainSocketConnection:
            assert self._path is not None
        # Where the store is, for error messages; never credentials.
        self.describe = self._path if self._path is not None else f"{self._host}:{self._port}"
        self._connection: _Connection | None = None
        self._connect_lock = asyncio.Lock()
        self._closed = False

    @property
    def address(self) -> tuple[str, int]:
        return self._host, self._port

    @property
    def unix_path(self) -> str | None:
        return self._path

    @property
    def db(self) -> int:
        return self._db

    def at(self, host: str, port: int) -> RedisWire:
        """A wire to another server with the same credentials, TLS settings and timeout."""
        other = RedisWire(self._url, self._timeout_s)  # not copy.copy: a compiled class has no copy
        other._host, other._port = host, port
        other.describe = f"{host}:{port}"
        return other

    async def call(self, *args: str | bytes | int) -> Any:
        """One command's reply; an error reply comes back as a ReplyError value."""
        connection = self._connection
        if connection is None or connection.broken:  # inline: this is every command's path
            connection = await self._connected()
        return await connection.send(_pack(args))

    async def call_asking(self, *args: str | bytes | int) -> Any:
        """A command preceded by ASKING on the same connection (Redis Cluster, a slot being
        migrated): the reply to the command."""
        connection = await self._connected()
        asking = connection.send(_pack(("ASKING",)))
        reply = connection.send(_pack(args))
        await asking
        return await reply

    async def script(self, script: Script, keys: tuple[str, ...], args: tuple[str | bytes | int, ...]) -> Any:
        """Run a script (EVALSHA, then EVAL if Redis does not know it); an error reply raises."""
        return await run_script(self.call, self.describe, script, keys, args)

    async def transaction(self, key: str, commands: tuple[tuple[str | bytes | int, ...], ...]) -> Any:
        """`commands` in one MULTI ... EXEC, run atomically: the list of their replies, or the
        ReplyError of one that could not be queued (then none ran). `key` is one of their keys
        (a cluster sends the transaction to its node). Cheaper for Redis than a script that
        reads as much: no reply goes through Lua."""
        connection = self._connection
        if connection is None or connection.broken:
            connection = await self._connected()
        *queued, done = connection.send_all([_MULTI, *(_pack(c) for c in commands), _EXEC])
        try:
            reply = await done
        except StateStoreUnavailable:
            for future in queued:  # failed with it: retrieved, so nothing logs them
                if future.done():
                    future.exception()
            raise
        for future in queued:  # MULTI's OK, then each command's QUEUED or why not
            answer = future.result()
            if isinstance(answer, ReplyError):
                return answer
        return reply

    async def _connected(self) -> _Connection:
        async with self._connect_lock:
            connection = self._connection
            if connection is not None and not connection.broken:
                return connection
            if self._closed:
                raise unavailable(self.describe, ConnectionError("the store was closed"))
            loop = asyncio.get_running_loop()
            try:
                async with asyncio.timeout(self._timeout_s):
                    if self._path is not None:
                        _, connection = await loop.create_unix_connection(
                            lambda: _Connection(self.describe, self._timeout_s), self._path
                        )
                    else:
                        _, connection = await loop.create_connection(
                            lambda: _Connection(self.describe, self._timeout_s),
                            self._host,
                            self._port,
                            ssl=self._ssl,
                        )
            except (OSError, TimeoutError) as exc:
                raise unavailable(self.describe, exc) from exc
            setup: list[tuple[str | bytes | int, ...]] = []
            if self._password is not None:
                user = (self._username,) if self._username else ()
                setup.append(("AUTH", *user, self._password))
            if self._db:
                setup.append(("SELECT", self._db))
            replies = await asyncio.gather(*(connection.send(_pack(c)) for c in setup))
            for command, reply in zip(setup, replies, strict=True):
                if isinstance(reply, ReplyError):
                    connection.close()
                    # The error's text only: it never repeats the credentials.
                    raise unavailable(self.describe, ConnectionError(f"{command[0]!s} refused: {reply}"))
            self._connection = connection
            return connection

    async def aclose(self) -> None:
        """Wait for the commands in flight, then close."""
        self._closed = True
        connection = self._connection
        if connection is not None:
            await connection.drain()
            connection.close()


class _Connection(asyncio.Protocol):
    def __init__(self, describe: str, timeout_s: float) -> None:
        self._describe = describe
        self._timeout_s = timeout_s
        self._reader = hiredis.Reader()
        self._loop = asyncio.get_running_loop()
        # Futures of the commands written or queued, oldest first, with when each was queued.
        self._pending: deque[tuple[asyncio.Future[Any], float]] = deque()
        self._queued: list[bytes] = []  # commands of this turn not yet written
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.broken = False

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        reader, pending = self._reader, self._pending
        reader.feed(data)
        try:
            while (reply := reader.gets()) is not False:
                future = pending.popleft()[0]
                if not future.done():  # its caller may have gone away
                    future.set_result(reply)
        except (hiredis.ProtocolError, IndexError) as exc:  # garbage, or a reply nobody asked for
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError("connection closed by the server"))

    # commands

    def send(self, command: bytes) -> asyncio.Future[Any]:
        future = self._loop.create_future()
        if self.broken:
            future.set_exception(unavailable(self._describe, ConnectionError("connection lost")))
            return future
        pending = self._pending
        pending.append((future, self._loop.time()))
        self._write(command, len(pending) == 1)
        return future

    def send_all(self, commands: list[bytes]) -> list[asyncio.Future[Any]]:
        """The futures of `commands`' replies, the commands written together (a lone
        transaction costs one system call, not one for its first command and one for the rest)."""
        futures = [self._loop.create_future() for _ in commands]
        if self.broken:
            for future in futures:
                future.set_exception(unavailable(self._describe, ConnectionError("connection lost")))
            return futures
        now, pending = self._loop.time(), self._pending
        alone = not pending
        pending.extend((future, now) for future in futures)
        self._write(b"".join(commands), alone)
        return futures

    def _write(self, command: bytes, alone: bool) -> None:
        if self._queued:  # a flush is due at the end of this turn: join it
            self._queued.append(command)
        elif not alone:  # others are in flight: gather this turn's commands in one write
            self._queued.append(command)
            self._loop.call_soon(self._flush)
        else:  # nothing in flight: at once
            assert self._transport is not None
            self._transport.write(command)
        if self._timer is None:
            self._timer = self._loop.call_at(self._loop.time() + self._timeout_s, self._check_timeout)

    def _flush(self) -> None:
        queued, self._queued = self._queued, []
        if not self.broken and self._transport is not None:
            self._transport.write(b"".join(queued))

    def _check_timeout(self) -> None:
        self._timer = None
        if not self._pending or self.broken:
            return
        due = self._pending[0][1] + self._timeout_s
        if due <= self._loop.time():
            self._fail(TimeoutError(f"no reply from Redis within {self._timeout_s} s"))
        else:
            self._timer = self._loop.call_at(due, self._check_timeout)

    def _fail(self, exc: BaseException) -> None:
        if self.broken:
            return
        self.broken = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._transport.abort()
        pending, self._pending = self._pending, deque()
        for future, _ in pending:
            if not future.done():  # written (or about to be): Redis may still run it
                future.set_exception(unavailable(self._describe, exc, may_have_applied=True))

    async def drain(self) -> None:
        if self._pending:
            await asyncio.gather(*(f for f, _ in self._pending), return_exceptions=True)

    def close(self) -> None:
        self._fail(ConnectionError("connection closed by the gateway"))


async def run_script(
    call: Callable[..., Awaitable[Any]],
    describe: str,
    script: Script,
    keys: tuple[str, ...],
    args: tuple[str | bytes | int, ...],
) -> Any:
    reply = await call("EVALSHA", script.sha, len(keys), *keys, *args)
    if isinstance(reply, ReplyError) and str(reply).startswith("NOSCRIPT"):
        # Not run: safe to send again, whole (which also caches it under its SHA-1).
        reply = await call("EVAL", script.source, len(keys), *keys, *args)
    if isinstance(reply, ReplyError):
        raise unavailable(describe, reply)
    return reply


def _pack(command: tuple[str | bytes | int, ...]) -> bytes:
    # hiredis's stub types the argument as a one-element tuple; it takes any number.
    packed: bytes = hiredis.pack_command(cast(Any, command))
    return packed


_MULTI, _EXEC = _pack(("MULTI",)), _pack(("EXEC",))


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)


def unavailable(describe: str, exc: BaseException, may_have_applied: bool = False) -> StateStoreUnavailable:
    what = f"state store (Redis at {describe}) is unreachable or failed ({type(exc).__name__})"
    error = StateStoreUnavailable(
        f"The {what}; budgets and rate limits cannot be checked, so the request was not processed.",
        may_have_applied=may_have_applied,
        failure=f"the {what}",
    )
    error.__cause__ = exc  # for the log; clients see only the message above
    return error
