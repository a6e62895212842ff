"""The AuditSink the stages use: records are queued on the request path and written by one
background task, in batches, through an AuditWriter.

Non-mandatory (the default), `append` never waits: a full queue drops the record, counts
it and logs an error (on the 1st, 2nd, 4th, 8th... drop, so a flood does not flood the
log). The writer then lingers up to `flush_interval_s` after a batch's first record, so a
busy gateway hands one large batch to the writer (one thread hop, one lock, one fsync)
rather than a few records at a time; a record reaches the log at most that much later.

Mandatory, `append` waits until its record is written and raises AuditWriteFailed when
the write fails or takes longer than `write_timeout_s`, so the request fails closed; a
mandatory sink never lingers.

`prepare` (the persistence scrub) runs in the background task; a record it cannot
prepare is never written unprepared.

The queue is a deque with a future for the writer to wait on, not an `asyncio.Queue`: every
request appends two records, and asyncio's queue is Python (its put, get and task_done ran
some 230 bytecodes a request, interpreted beside this compiled module).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from gateway.errors import AuditWriteFailed
from gateway.ports import AuditWriter

logger = logging.getLogger("tollgate.audit")

Record = dict[str, Any]
_Item = tuple[Record, "asyncio.Future[None] | None"]


class QueuedSink:
    def __init__(
        self,
        writer: AuditWriter,
        *,
        queue_size: int = 10_000,
        mandatory: bool = False,
        write_timeout_s: float = 5.0,
        batch_size: int = 256,
        flush_interval_s: float = 0.0,
        prepare: Callable[[Record], Record] | None = None,
    ) -> None:
        self._writer = writer
        self._records: collections.deque[_Item] = collections.deque()
        self._queue_size = queue_size
        self._unwritten = 0  # appended and not yet written (or failed): what `aclose` waits for
        self._record_came: asyncio.Future[None] | None = None  # the writer's, while none is queued
        self._room: collections.deque[asyncio.Future[None]] = collections.deque()  # mandatory appends
        self._drained: asyncio.Future[None] | None = None  # `aclose`'s, while records are unwritten
        self._mandatory = mandatory
        self._timeout = write_timeout_s
        self._batch_size = batch_size
        self._flush_interval_s = flush_interval_s
        self._closing = asyncio.Event()  # set by aclose: a lingering batch is written at once
        self._prepare = prepare
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        self.dropped = 0  # queue full
        self.failed = 0  # the writer or `prepare` failed

    async def append(self, record: Record) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="audit-writer")
        if not self._mandatory:
            if len(self._records) >= self._queue_size:
                self._drop()
            else:
                self._push((record, None))
            return
        loop = asyncio.get_running_loop()
        written: asyncio.Future[None] = loop.create_future()
        try:
            async with asyncio.timeout(self._timeout):
                while len(self._records) >= self._queue_size:  # a full queue: wait for room
                    room: asyncio.Future[None] = loop.create_future()
                    self._room.append(room)
                    await room
                self._push((record, written))
                await written
        except TimeoutError:
            raise AuditWriteFailed(
                "The decision log could not be written in time; the request was refused."
            ) from None

    async def aclose(self, drain_timeout_s: float = 5.0) -> None:
        """Write what is queued (for up to `drain_timeout_s`), then stop and close the writer."""
        self._closing.set()
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(drain_timeout_s):
                    while self._unwritten > 0:
                        drained: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                        self._drained = drained
                        await drained
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._writer.aclose()

    def _drop(self) -> None:
        self.dropped += 1
        if self.dropped & (self.dropped - 1) == 0:
            logger.error("audit queue full: records dropped", extra={"dropped_total": self.dropped})

    def _push(self, item: _Item) -> None:
        self._records.append(item)
        self._unwritten += 1
        came = self._record_came
        if came is not None and not came.done():
            came.set_result(None)

    async def _run(self) -> None:
        records = self._records
        while True:
            if not records:
                came: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._record_came = came
                await came
                self._record_came = None
                continue
            batch = [records.popleft()]
            if self._lingers():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._flush_interval_s):
                        await self._closing.wait()
            while len(batch) < self._batch_size and records:
                batch.append(records.popleft())
            self._make_room()
            try:
                await self._write(batch)
            finally:
                self._written_or_failed(len(batch))

    def _make_room(self) -> None:
        """Wakes the mandatory appends waiting for room, as many as there is room for (one whose
        wait timed out is passed over)."""
        free = self._queue_size - len(self._records)
        room = self._room
        while room and free > 0:
            waiter = room.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1

    def _written_or_failed(self, count: int) -> None:
        self._unwritten -= count
        drained = self._drained
        if self._unwritten <= 0 and drained is not None and not drained.done():
            drained.set_result(None)

    def _lingers(self) -> bool:
        # A request waits on every mandatory record; a full batch has nothing left to wait for.
        if self._mandatory or self._flush_interval_s <= 0:
            return False
        return len(self._records) < self._batch_size - 1

    async def _write(self, batch: list[_Item]) -> None:
        ready: list[_Item] = []
        for record, written in batch:
            try:
                ready.append((self._prepare(record) if self._prepare else record, written))
            except Exception:
                logger.exception("audit record could not be prepared; not written")
                self._fail([(record, written)])
        if not ready:
            return
        try:
            await self._writer.write([record for record, _ in ready])
        except Exception:
            logger.exception("audit write failed", extra={"records": len(ready)})
            self._fail(ready)
            return
        self.written += len(ready)
        for _, written in ready:
            if written is not None and not written.done():
                written.set_result(None)

    def _fail(self, items: list[_Item]) -> None:
        self.failed += len(items)
        for _, written in items:
            if written is not None and not written.done():
                written.set_exception(
                    AuditWriteFailed("The decision log could not be written; the request was refused.")
                )
