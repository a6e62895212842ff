"""The embedded job store: one SQLite file (WAL mode) shared by every worker process on the
machine, implementing the `JobStore` port (gateway/jobs/store.py).

Each operation runs inside a `BEGIN IMMEDIATE` transaction, so the file's write lock makes
it atomic against every other process: two workers never claim the same job, and a job is
never lost (a claim that lapses puts it back within reach of `claim`). The connection lives
on one thread of its own (sqlite3 blocks); operations that arrive while it is busy run
together in one transaction (group commit: a loaded worker pays one lock and one commit for
many), and should one of them fail, each runs again alone. The file is apart from the
metering store's, so a queue of thousands of jobs never holds the budget's lock. The
operations themselves are in `sqlite_jobs_tx.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from adapters.state import sqlite_jobs_tx as tx
from adapters.state.sqlite_files import open_wal
from gateway.errors import StateStoreUnavailable
from gateway.jobs.records import (
    BatchView,
    Claim,
    JobResult,
    JobView,
    NewBatch,
    NewJob,
    QueueDepth,
    StoredFile,
    Webhook,
)

T = TypeVar("T")
_Call = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.Future[Any]", asyncio.AbstractEventLoop]

_BUSY_TIMEOUT_MS = 10_000


class SQLiteJobStore:
    name = "sqlite"

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time) -> None:
        self._path = str(path)
        self._clock = clock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tollgate-jobs")
        self._db: sqlite3.Connection | None = None
        self._guard = threading.Lock()  # the pending list is shared by the event loop and the store's thread
        self._pending: list[_Call] = []
        self._draining = False

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            db = open_wal(self._path, _BUSY_TIMEOUT_MS)
            db.executescript(tx.SCHEMA)
            self._db = db
        return self._db

    async def _run(self, operation: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._guard:
            self._pending.append((operation, args, future, loop))
            start = not self._draining
            self._draining = True
        if start:
            self._executor.submit(self._drain)
        try:
            return await future
        except (sqlite3.Error, OSError) as exc:
            raise StateStoreUnavailable(f"The job store (SQLite file {self._path}) failed: {exc}.") from exc

    def _drain(self) -> None:
        """On the store's thread: what is pending, one transaction per batch, until nothing is."""
        while True:
            with self._guard:
                batch, self._pending = self._pending, []
                if not batch:
                    self._draining = False
                    return
            for (_, _, future, loop), outcome in zip(batch, self._transact(batch), strict=True):
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
                    loop.call_soon_threadsafe(_resolve, future, outcome)

    def _transact(self, batch: list[_Call]) -> list[object]:
        """Group commit: the batch in one transaction; should one operation fail, each runs
        again in a transaction of its own, so only the failing one is refused."""
        try:
            db = self._connection()
        except (sqlite3.Error, OSError) as exc:
            return [exc] * len(batch)
        outcomes = self._in_one_transaction(db, batch)
        if outcomes is not None:
            return outcomes
        return [self._in_one_transaction(db, [call]) or [RuntimeError("unreachable")] for call in batch]

    def _in_one_transaction(self, db: sqlite3.Connection, batch: list[_Call]) -> list[object] | None:
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            return [exc] * len(batch)
        try:
            now = self._clock()
            outcomes: list[object] = [operation(db, now, *args) for operation, args, _, _ in batch]
        except Exception as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            return [exc] if len(batch) == 1 else None
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            return [exc] * len(batch)
        return outcomes

    async def submit(self, jobs: list[NewJob]) -> None:
        await self._run(tx.insert_jobs, jobs)

    async def claim(self, worker: str, limit: int, visibility_s: float) -> list[Claim]:
        return await self._run(tx.claim, worker, limit, visibility_s)

    async def extend(self, claim: Claim, visibility_s: float) -> bool:
        return await self._run(tx.extend, claim, visibility_s)

    async def retry_later(
        self, claim: Claim, delay_s: float, cause: str, payload: bytes | None = None
    ) -> bool:
        return await self._run(tx.retry_later, claim, delay_s, cause, payload)

    async def finish(self, claim: Claim, result: JobResult) -> bool:
        return await self._run(tx.finish, claim, result)

    async def job(self, tenant: str, job_id: str) -> JobView | None:
        return await self._run(tx.job, tenant, job_id)

    async def cancel_job(self, tenant: str, job_id: str, result: JobResult) -> NewJob | None:
        return await self._run(tx.cancel_job, tenant, job_id, result)

    async def put_file(self, file: StoredFile, content: bytes) -> None:
        await self._run(tx.put_file, file, content)

    async def file(self, tenant: str, file_id: str) -> StoredFile | None:
        return await self._run(tx.file, tenant, file_id)

    async def file_content(self, tenant: str, file_id: str) -> bytes | None:
        return await self._run(tx.file_content, tenant, file_id)

    async def files(self, tenant: str, limit: int) -> list[StoredFile]:
        return await self._run(tx.files, tenant, limit)

    async def delete_file(self, tenant: str, file_id: str) -> bool:
        return await self._run(tx.delete_file, tenant, file_id)

    async def create_batch(
        self, batch: NewBatch, jobs: list[NewJob], refused: list[tuple[NewJob, JobResult]]
    ) -> None:
        await self._run(tx.create_batch, batch, jobs, refused)

    async def batch(self, tenant: str, batch_id: str) -> BatchView | None:
        return await self._run(tx.batch, tenant, batch_id)

    async def batches(self, tenant: str, after: str | None, limit: int) -> list[BatchView]:
        return await self._run(tx.batches, tenant, after, limit)

    async def batch_jobs(self, tenant: str, batch_id: str) -> list[JobView]:
        return await self._run(tx.batch_jobs, tenant, batch_id)

    async def cancel_batch(self, tenant: str, batch_id: str, result: JobResult) -> list[NewJob] | None:
        return await self._run(tx.cancel_batch, tenant, batch_id, result)

    async def put_webhook(self, hook: Webhook) -> None:
        await self._run(tx.put_webhook, hook)

    async def webhooks(self, tenant: str) -> list[Webhook]:
        return await self._run(tx.webhooks, tenant)

    async def delete_webhook(self, tenant: str, hook_id: str) -> bool:
        return await self._run(tx.delete_webhook, tenant, hook_id)

    async def depth(self) -> list[QueueDepth]:
        return await self._run(tx.depth)

    async def purge(self) -> int:
        return await self._run(tx.purge)

    async def aclose(self) -> None:
        def close() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await asyncio.get_running_loop().run_in_executor(self._executor, close)
        self._executor.shutdown(wait=True)


def _resolve(future: asyncio.Future[Any], outcome: object) -> None:
    if future.done():  # the caller went away
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
