"""The queued sink's flush interval: records that arrive while a batch lingers go out in
that one batch; a mandatory record is never held; closing writes a lingering batch at once.
And its queue: a mandatory record waits for room in a full one (and fails its request when
none comes in time); closing waits for what is being written."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from adapters.audit.jsonl import JsonlWriter, verify_file
from gateway.audit.queued_sink import QueuedSink
from gateway.errors import AuditWriteFailed


class BatchesSeen:
    """The JSONL writer, noting the size of every batch it is handed."""

    def __init__(self, path: Path) -> None:
        self._writer = JsonlWriter(path, fsync=False)
        self.batches: list[int] = []

    async def write(self, records: list[dict[str, Any]]) -> None:
        self.batches.append(len(records))
        await self._writer.write(records)

    async def aclose(self) -> None:
        await self._writer.aclose()


def _record(n: int) -> dict[str, Any]:
    return {"v": 1, "type": "decision", "decision_id": f"d{n}"}


async def test_records_arriving_while_a_batch_lingers_are_written_together(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    writer = BatchesSeen(path)
    sink = QueuedSink(writer, flush_interval_s=2.0)
    for n in range(20):  # each append lets the writer's task run: it has the first one at once
        await sink.append(_record(n))
        await asyncio.sleep(0)
    assert writer.batches == []  # still lingering
    for _ in range(500):
        if writer.batches:
            break
        await asyncio.sleep(0.01)
    assert writer.batches == [20]
    await sink.aclose()
    assert [orjson.loads(line)["decision_id"] for line in path.read_bytes().splitlines()] == [
        f"d{n}" for n in range(20)
    ]
    assert verify_file(path).ok


async def test_without_an_interval_each_record_is_written_as_soon_as_the_writer_is_free(
    tmp_path: Path,
) -> None:
    writer = BatchesSeen(tmp_path / "audit.jsonl")
    sink = QueuedSink(writer)
    for n in range(5):
        await sink.append(_record(n))
        for _ in range(200):
            if sum(writer.batches) == n + 1:
                break
            await asyncio.sleep(0.01)
    assert writer.batches == [1, 1, 1, 1, 1]
    await sink.aclose()


async def test_a_mandatory_record_is_written_without_lingering(tmp_path: Path) -> None:
    writer = BatchesSeen(tmp_path / "audit.jsonl")
    sink = QueuedSink(writer, mandatory=True, flush_interval_s=60.0)
    async with asyncio.timeout(10):  # an hour's linger would fail here, not hang
        await sink.append(_record(1))
    assert writer.batches == [1]
    await sink.aclose()


async def test_closing_writes_a_lingering_batch_at_once(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    writer = BatchesSeen(path)
    sink = QueuedSink(writer, flush_interval_s=60.0)
    for n in range(3):
        await sink.append(_record(n))
    await asyncio.sleep(0.05)
    async with asyncio.timeout(10):
        await sink.aclose()
    assert writer.batches == [3]
    assert sink.written == 3
    assert verify_file(path).records == 3


class HeldWriter(BatchesSeen):
    """The JSONL writer, each batch held until the test lets it through."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.go = asyncio.Event()

    async def write(self, records: list[dict[str, Any]]) -> None:
        await self.go.wait()
        await super().write(records)


async def test_a_mandatory_record_waits_for_room_in_a_full_queue(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    writer = HeldWriter(path)
    sink = QueuedSink(writer, mandatory=True, queue_size=1, write_timeout_s=30.0)
    first = asyncio.ensure_future(sink.append(_record(1)))
    await asyncio.sleep(0.05)  # the writer holds the first, and the queue is empty again
    second = asyncio.ensure_future(sink.append(_record(2)))  # queued: the queue is full
    third = asyncio.ensure_future(sink.append(_record(3)))  # waits for room
    await asyncio.sleep(0.05)
    assert not (first.done() or second.done() or third.done())
    writer.go.set()
    async with asyncio.timeout(10):
        await asyncio.gather(first, second, third)
    await sink.aclose()
    assert sum(writer.batches) == 3
    written = [orjson.loads(line)["decision_id"] for line in path.read_bytes().splitlines()]
    assert written == ["d1", "d2", "d3"]
    assert verify_file(path).ok


async def test_a_mandatory_record_that_finds_no_room_in_time_fails_its_request(tmp_path: Path) -> None:
    writer = HeldWriter(tmp_path / "audit.jsonl")
    sink = QueuedSink(writer, mandatory=True, queue_size=1, write_timeout_s=0.2)
    held = asyncio.ensure_future(sink.append(_record(1)))  # the writer holds it
    await asyncio.sleep(0.05)
    queued = asyncio.ensure_future(sink.append(_record(2)))  # fills the queue
    with pytest.raises(AuditWriteFailed):
        await sink.append(_record(3))  # no room within its timeout
    writer.go.set()  # the two already queued are still written
    for waiting in (held, queued):
        with contextlib.suppress(AuditWriteFailed):
            await waiting
    await sink.aclose()
    assert sum(writer.batches) == 2


async def test_closing_waits_for_the_batch_being_written(tmp_path: Path) -> None:
    writer = HeldWriter(tmp_path / "audit.jsonl")
    sink = QueuedSink(writer)
    for n in range(3):
        await sink.append(_record(n))
    await asyncio.sleep(0.05)  # the writer holds the batch
    asyncio.get_running_loop().call_later(0.1, writer.go.set)
    async with asyncio.timeout(10):
        await sink.aclose()
    assert writer.batches == [3]
    assert sink.written == 3
