"""The Redis store's own connection (adapters/state/redis_wire.py): pipelining, scripts
Redis does not know, timeouts, dropped connections, the handshake. Against the real Redis
where it can be, else a small fake server speaking RESP."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import hiredis
import pytest

from adapters.state.redis_wire import RedisWire, ReplyError, Script
from gateway.errors import StateStoreUnavailable
from tests.metering.conftest import REDIS_URL

Handler = Callable[[int, list[bytes]], Awaitable[bytes | None]]


class FakeRedis:
    """Answers each command with what `handler(connection number, command)` returns;
    None means no answer (a server that hangs); b"" closes the connection."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.commands: list[tuple[int, list[bytes]]] = []
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> FakeRedis:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/0"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        parser = hiredis.Reader()
        try:
            while data := await reader.read(65536):
                parser.feed(data)
                while (command := parser.gets()) is not False:
                    self.commands.append((number, command))
                    answer = await self.handler(number, command)
                    if answer == b"":
                        writer.close()
                        return
                    if answer is not None:
                        writer.write(answer)
        except ConnectionError:
            pass
        finally:
            writer.close()


@pytest.fixture
async def wire() -> AsyncIterator[RedisWire]:
    made = RedisWire(REDIS_URL, 1.0)
    yield made
    await made.aclose()


async def test_commands_made_together_each_get_their_own_reply(wire: RedisWire) -> None:
    values = [uuid.uuid4().hex.encode() for _ in range(300)]
    replies = await asyncio.gather(*(wire.call("ECHO", v) for v in values))
    assert replies == values
    assert await wire.call("ECHO", "after") == b"after"


async def test_a_caller_that_goes_away_does_not_shift_the_replies(wire: RedisWire) -> None:
    first = asyncio.ensure_future(wire.call("ECHO", "first"))
    await asyncio.sleep(0)
    first.cancel()
    second = await wire.call("ECHO", "second")
    assert second == b"second"
    assert await wire.call("ECHO", "third") == b"third"


async def test_an_error_reply_is_a_value_and_the_connection_goes_on(wire: RedisWire) -> None:
    reply = await wire.call("NOSUCHCOMMAND")
    assert isinstance(reply, ReplyError)
    assert await wire.call("PING") == b"PONG"


async def test_a_script_redis_does_not_know_is_sent_whole_then_by_its_sha(wire: RedisWire) -> None:
    marker = uuid.uuid4().hex  # a script no Redis has seen
    script = Script(f"return {{ARGV[1], '{marker}'}}")
    assert await wire.call("SCRIPT", "EXISTS", script.sha) == [0]
    assert await wire.script(script, (), ("x",)) == [b"x", marker.encode()]
    assert await wire.call("SCRIPT", "EXISTS", script.sha) == [1]
    assert await wire.script(script, (), ("y",)) == [b"y", marker.encode()]


async def test_a_script_error_raises_unavailable(wire: RedisWire) -> None:
    with pytest.raises(StateStoreUnavailable):
        await wire.script(Script("return redis.error_reply('broken')"), (), ())
    assert await wire.call("PING") == b"PONG"


async def test_a_transaction_gives_its_commands_replies_among_other_callers(wire: RedisWire) -> None:
    key = f"tgw:{uuid.uuid4().hex}"
    others = [wire.call("ECHO", str(n)) for n in range(50)]
    reply = await wire.transaction(key, (("SET", key, "1"), ("INCR", key), ("GET", key)))
    assert reply == [b"OK", 2, b"2"]
    assert await asyncio.gather(*others) == [str(n).encode() for n in range(50)]
    await wire.call("DEL", key)


async def test_a_transaction_a_command_of_which_cannot_be_queued_runs_nothing(wire: RedisWire) -> None:
    key = f"tgw:{uuid.uuid4().hex}"
    reply = await wire.transaction(key, (("SET", key, "1"), ("NOSUCHCOMMAND",)))
    assert isinstance(reply, ReplyError)
    assert await wire.call("EXISTS", key) == 0
    assert await wire.call("PING") == b"PONG"


async def test_a_transaction_whose_connection_drops_is_unavailable_and_leaves_nothing_behind() -> None:
    async def handler(connection: int, command: list[bytes]) -> bytes | None:
        if connection == 1 and command[0] == b"EXEC":
            return b""
        return b"+QUEUED\r\n" if command[0] == b"GET" else b"+OK\r\n"

    async with FakeRedis(handler) as fake:
        wire = RedisWire(fake.url, 1.0)
        with pytest.raises(StateStoreUnavailable):
            await wire.transaction("k", (("GET", "k"),))
        assert await wire.call("PING") == b"OK"
        assert fake.connections == 2
        await wire.aclose()


async def test_no_reply_within_the_timeout_fails_every_waiting_command_then_a_new_connection_serves() -> None:
    async def handler(connection: int, command: list[bytes]) -> bytes | None:
        return None if connection == 1 else b"+PONG\r\n"

    async with FakeRedis(handler) as fake:
        wire = RedisWire(fake.url, 0.2)
        started = asyncio.get_running_loop().time()
        results = await asyncio.gather(wire.call("PING"), wire.call("PING"), return_exceptions=True)
        assert all(isinstance(r, StateStoreUnavailable) for r in results)
        assert "Redis at 127.0.0.1:" in str(results[0])
        assert 0.15 < asyncio.get_running_loop().time() - started < 1.0
        assert await wire.call("PING") == b"PONG"
        assert fake.connections == 2
        await wire.aclose()


async def test_a_connection_the_server_drops_fails_its_commands_once_and_is_reopened() -> None:
    async def handler(connection: int, command: list[bytes]) -> bytes | None:
        return b"" if connection == 1 and command[0] == b"ECHO" else b"+PONG\r\n"

    async with FakeRedis(handler) as fake:
        wire = RedisWire(fake.url, 1.0)
        assert await wire.call("PING") == b"PONG"
        with pytest.raises(StateStoreUnavailable):
            await wire.call("ECHO", "x")
        assert await wire.call("PING") == b"PONG"
        assert fake.connections == 2
        # Nothing was sent twice: the dropped command went once, on the first connection.
        assert [c for c in fake.commands if c[1][0] == b"ECHO"] == [(1, [b"ECHO", b"x"])]
        await wire.aclose()


async def test_an_unreachable_redis_is_unavailable_quickly() -> None:
    async with FakeRedis(lambda _c, _m: asyncio.sleep(0, b"+OK\r\n")) as fake:
        url = fake.url
    wire = RedisWire(url, 0.5)  # the server is gone: connection refused
    with pytest.raises(StateStoreUnavailable):
        await wire.call("PING")
    await wire.aclose()


async def test_credentials_and_database_from_the_url_are_sent_first_and_never_shown() -> None:
    async def handler(connection: int, command: list[bytes]) -> bytes | None:
        if command[0] == b"AUTH":
            wrong = b"-WRONGPASS invalid username-password pair\r\n"
            return b"+OK\r\n" if command[-1] == b"s3cret" else wrong
        return b"+OK\r\n" if command[0] == b"SELECT" else b"+PONG\r\n"

    async with FakeRedis(handler) as fake:
        port = fake.url.split(":")[2].split("/")[0]
        wire = RedisWire(f"redis://app:s3cret@127.0.0.1:{port}/5", 1.0)
        assert await wire.call("PING") == b"PONG"
        assert [c for _, c in fake.commands] == [
            [b"AUTH", b"app", b"s3cret"],
            [b"SELECT", b"5"],
            [b"PING"],
        ]
        await wire.aclose()
        wrong = RedisWire(f"redis://:not-it@127.0.0.1:{port}", 1.0)
        with pytest.raises(StateStoreUnavailable) as refused:
            await wrong.call("PING")
        assert "not-it" not in str(refused.value)
        assert "not-it" not in repr(refused.value.__cause__)
        await wrong.aclose()


def test_an_unsupported_url_option_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="socket_keepalive"):
        RedisWire("redis://127.0.0.1:6379/0?socket_keepalive=true", 1.0)
