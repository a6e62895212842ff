"""The queued sink over a Redis stream (the real Redis at 127.0.0.1:6379): one chain however
many writers append, continued by a new writer, and a tampered stream caught by verify."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from adapters.audit.redis_stream import RedisStreamWriter, read_stream, verify_stream
from gateway.audit.queued_sink import QueuedSink
from gateway.errors import AuditWriteFailed
from tests.harness import free_port

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
async def stream() -> AsyncIterator[str]:
    key = f"test:audit:{uuid.uuid4().hex}"
    yield key
    client: Redis = Redis.from_url(REDIS_URL)
    await client.delete(key)
    await client.aclose()


def _record(n: int, writer: str = "w") -> dict[str, Any]:
    return {"v": 1, "type": "decision", "decision_id": f"d{n}", "writer": writer}


async def test_records_are_appended_chained_and_verifiable(stream: str) -> None:
    sink = QueuedSink(RedisStreamWriter(REDIS_URL, stream), mandatory=True)
    for n in range(10):
        await sink.append(_record(n))
    await sink.aclose()
    records = [orjson.loads(r) for r in await read_stream(REDIS_URL, stream)]
    assert [r["seq"] for r in records] == list(range(1, 11))
    assert [r["decision_id"] for r in records] == [f"d{n}" for n in range(10)]
    report = await verify_stream(REDIS_URL, stream)
    assert report.ok
    assert report.records == 10


async def test_many_writers_keep_one_chain(stream: str) -> None:
    sinks = [QueuedSink(RedisStreamWriter(REDIS_URL, stream), batch_size=4) for _ in range(4)]

    async def write(i: int, sink: QueuedSink) -> None:
        for n in range(50):
            await sink.append(_record(n, writer=str(i)))
            await asyncio.sleep(0)

    await asyncio.gather(*(write(i, sink) for i, sink in enumerate(sinks)))
    for sink in sinks:
        await sink.aclose()
    report = await verify_stream(REDIS_URL, stream)
    assert report.ok, report.problem
    assert report.records == 200
    assert sum(sink.written for sink in sinks) == 200


async def test_a_new_writer_continues_an_existing_stream(stream: str) -> None:
    for run in range(2):
        sink = QueuedSink(RedisStreamWriter(REDIS_URL, stream))
        for n in range(3):
            await sink.append(_record(run * 3 + n))
        await sink.aclose()
    records = [orjson.loads(r) for r in await read_stream(REDIS_URL, stream)]
    assert [r["seq"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert (await verify_stream(REDIS_URL, stream)).ok


async def test_a_deleted_entry_is_caught(stream: str) -> None:
    sink = QueuedSink(RedisStreamWriter(REDIS_URL, stream))
    for n in range(4):
        await sink.append(_record(n))
    await sink.aclose()
    client: Redis = Redis.from_url(REDIS_URL)
    entries = await client.xrange(stream)
    await client.xdel(stream, entries[1][0])
    await client.aclose()
    report = await verify_stream(REDIS_URL, stream)
    assert report.problem is not None
    assert (report.problem.seq, report.problem.kind) == (3, "removed")


async def test_an_unreachable_redis_fails_a_mandatory_log_closed(stream: str) -> None:
    sink = QueuedSink(RedisStreamWriter(f"redis://127.0.0.1:{free_port()}/0", stream), mandatory=True)
    with pytest.raises(AuditWriteFailed):
        await sink.append(_record(1))
    assert sink.failed == 1
    await sink.aclose()
