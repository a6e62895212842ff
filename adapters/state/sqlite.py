"""The embedded state store: one SQLite file (WAL mode) shared by every worker process on
the machine.

Every operation runs inside a `BEGIN IMMEDIATE` write transaction, so the file's write
lock makes it atomic against every other process using the same file: budgets hold across
the server's workers, and a restart loses neither spend nor an open reservation. The
operations are in `sqlite_tx.py`; this module runs them on one dedicated thread per store
(sqlite3 blocks) and translates SQLite's failures.

Group commit: operations that arrive while the thread is busy run together in one
transaction, so a loaded worker pays one lock and one commit for many requests. Should one
of them fail, the transaction is rolled back and each runs again in a transaction of its
own: only the failing one is refused, and the common case needs no savepoints. Writers
also take an advisory lock on `<file>.lock` (flock) around each transaction: a process
waiting for it is woken the moment it is free, where SQLite's busy handler sleeps a
millisecond or more between tries.

`synchronous=NORMAL`: a committed transaction survives the process being killed; only an
operating-system crash or power loss may lose the last few. The write-ahead log is
checkpointed by a thread of its own (`sqlite_checkpoint.py`), not inside a request's COMMIT.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from adapters.state import sqlite_lease_tx, sqlite_sessions, sqlite_tx
from adapters.state.sqlite_checkpoint import BACKSTOP_PAGES, WalCheckpointer
from adapters.state.sqlite_files import open_wal
from gateway.errors import StateStoreUnavailable
from gateway.metering.lease_records import LeaseGrant, LeaseSync
from gateway.metering.records import (
    IdempotencyClaim,
    ReserveOutcome,
    ReserveRequest,
    Settlement,
    SpendRow,
    StoredResponse,
)
from gateway.sessions.records import SessionRecord, SessionUpdate

T = TypeVar("T")

_BUSY_TIMEOUT_MS = 10_000  # how long a transaction waits for another process's write lock
_CHECKPOINT_INTERVAL_S = 0.5


_Call = tuple[Callable[..., Any], tuple[object, ...], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


def _now_us() -> int:
    return time.time_ns() // 1000


def _resolve(future: asyncio.Future[Any], outcome: object, path: str) -> None:
    if future.done():  # the caller went away
        return
    if isinstance(outcome, sqlite3.Error | OSError):
        what = f"state store (SQLite file {path}) failed: {outcome}"
        error = StateStoreUnavailable(f"The {what}. The request was not processed.", failure=f"the {what}")
        error.__cause__ = outcome
        future.set_exception(error)
    else:
        future.set_result(outcome)


def _resolve_all(outcomes: list[tuple[asyncio.Future[Any], object]], path: str) -> None:
    for future, outcome in outcomes:
        _resolve(future, outcome, path)


class SQLiteStore:
    name = "sqlite"

    def __init__(
        self,
        path: str | Path,
        clock_us: Callable[[], int] = _now_us,
        checkpoint_interval_s: float = _CHECKPOINT_INTERVAL_S,
    ) -> None:
        self._path = str(path)
        self._clock_us = clock_us
        self._checkpointer = WalCheckpointer(self._path, checkpoint_interval_s)
        # One thread owns the connection: sqlite3 calls block, and must not run on the event loop.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tollgate-sqlite")
        self._db: sqlite3.Connection | None = None
        self._lock: int | None = None  # file descriptor of the advisory lock file
        self._guard = threading.Lock()  # the pending list is shared by the loop and the store's thread
        self._pending: list[_Call] = []
        self._draining = False

    def _connection(self) -> sqlite3.Connection:
        if self._lock is None:
            self._lock = os.open(self._path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        if self._db is None:
            db = open_wal(self._path, _BUSY_TIMEOUT_MS)
            db.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")
            sqlite_tx.create_schema(db)
            self._db = db
            self._checkpointer.start()
        return self._db

    async def _run(self, operation: Callable[..., T], *args: object) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._guard:
            self._pending.append((operation, args, future, loop))
            start = not self._draining
            self._draining = True
        if start:
            self._executor.submit(self._drain)
        return await future

    def _drain(self) -> None:
        """On the store's thread: run what is pending, batch after batch, until nothing is."""
        while True:
            with self._guard:
                batch, self._pending = self._pending, []
                if not batch:
                    self._draining = False
                    return
            # One wake-up per event loop for the whole batch, not one per operation.
            resolved: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], object]]] = {}
            for (_, _, future, loop), outcome in zip(batch, self._transact(batch), strict=True):
                resolved.setdefault(loop, []).append((future, outcome))
            for loop, outcomes in resolved.items():
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
                    loop.call_soon_threadsafe(_resolve_all, outcomes, self._path)

    def _transact(self, batch: list[_Call]) -> list[object]:
        """One transaction for the batch; each outcome is the operation's result or the
        sqlite3.Error it (or its transaction) raised. Should one operation of several fail,
        the batch is rolled back and each operation runs again in a transaction of its own,
        so only the failing one is refused; the common case pays for no savepoints."""
        try:
            db = self._connection()
        except (sqlite3.Error, OSError) as exc:
            return [exc] * len(batch)
        assert self._lock is not None
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        try:
            outcomes = self._in_one_transaction(db, batch)
            return outcomes if outcomes is not None else [self._alone(db, call) for call in batch]
        finally:
            fcntl.flock(self._lock, fcntl.LOCK_UN)

    def _alone(self, db: sqlite3.Connection, call: _Call) -> object:
        outcomes = self._in_one_transaction(db, [call])
        assert outcomes is not None  # an operation alone always has its outcome
        return outcomes[0]

    def _in_one_transaction(self, db: sqlite3.Connection, batch: list[_Call]) -> list[object] | None:
        """The batch's outcomes, committed together; None when one operation of several
        failed (all rolled back). A failed BEGIN or COMMIT is the outcome of every operation."""
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            return [exc] * len(batch)
        try:
            outcomes = [operation(db, self._clock_us(), *args) for operation, args, _, _ in batch]
        except sqlite3.Error as exc:
            _roll_back(db)
            return [exc] if len(batch) == 1 else None
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            _roll_back(db)
            return [exc] * len(batch)
        return outcomes

    async def reserve(self, request: ReserveRequest) -> ReserveOutcome:
        return await self._run(sqlite_tx.reserve, request)

    async def settle(self, settlement: Settlement) -> bool:
        return await self._run(sqlite_tx.settle, settlement)

    async def lease(self, sync: LeaseSync) -> LeaseGrant:
        return await self._run(sqlite_lease_tx.lease, sync)

    async def counters(self, tenant: str, counters: tuple[str, ...]) -> tuple[int, ...]:
        return await self._run(sqlite_tx.counters, tenant, counters)

    async def open_reservations(self, tenant: str) -> int:
        return await self._run(sqlite_tx.open_reservations, tenant)

    async def claim_idempotency(
        self, tenant: str, key: str, fingerprint: str, lease_s: float
    ) -> IdempotencyClaim:
        return await self._run(sqlite_tx.claim_idempotency, tenant, key, fingerprint, lease_s)

    async def complete_idempotency(
        self, tenant: str, key: str, fingerprint: str, response: StoredResponse, ttl_s: float
    ) -> None:
        await self._run(sqlite_tx.complete_idempotency, tenant, key, fingerprint, response, ttl_s)

    async def release_idempotency(self, tenant: str, key: str) -> None:
        await self._run(sqlite_tx.release_idempotency, tenant, key)

    async def spend(self, tenants: tuple[str, ...], since: str, until: str) -> list[SpendRow]:
        return await self._run(sqlite_tx.spend, tenants, since, until)

    async def session(self, tenant: str, session: str, decisions: bool = True) -> SessionRecord | None:
        return await self._run(sqlite_sessions.get, tenant, session, decisions)

    async def sessions(self, tenants: tuple[str, ...], sort: str, limit: int) -> list[SessionRecord]:
        return await self._run(sqlite_sessions.listed, tenants, sort, limit)

    async def update_session(self, update: SessionUpdate) -> None:
        await self._run(sqlite_sessions.apply, update)

    async def ping(self) -> None:
        await self._run(_select_one)

    async def aclose(self) -> None:
        def close() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None

        await asyncio.get_running_loop().run_in_executor(self._executor, close)
        self._executor.shutdown(wait=True)
        await asyncio.to_thread(self._checkpointer.stop)


def _roll_back(db: sqlite3.Connection) -> None:
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):  # the next BEGIN reports a connection gone bad
            db.execute("ROLLBACK")


def _select_one(db: sqlite3.Connection, now_us: int) -> None:
    db.execute("SELECT 1").fetchone()
