"""Live keys in the embedded store's SQLite file (the same file as budgets, by default).

One table, a row per key, each row stamped with the version of its last change; the
store's version is the largest stamp (an indexed MAX). Readers (every worker, every
`poll_interval_ms`) run plain read statements, which in WAL mode never wait for a writer;
a change runs in a `BEGIN IMMEDIATE` transaction, so two writers never take the same
version. The store has its own connection on its own thread: sqlite3 blocks, and this
keeps key reads out of the budget store's write batches.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from adapters.state.sqlite_files import open_wal
from gateway.errors import StateStoreUnavailable
from gateway.keystore.records import KeyChanges, KeyConflict, KeyNotFound, KeyNotUsable, LiveKey

T = TypeVar("T")

_BUSY_TIMEOUT_MS = 10_000
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS live_keys ("
    " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, hash TEXT NOT NULL UNIQUE, doc BLOB NOT NULL,"
    " expires_at_ms INTEGER, revoked_at_ms INTEGER, version INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS live_keys_version ON live_keys (version)",
)


class SQLiteKeyStore:
    name = "sqlite"

    def __init__(self, path: str | Path) -> None:
        self._path = str(path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tollgate-sqlite-keys")
        self._db: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            db = open_wal(self._path, _BUSY_TIMEOUT_MS)
            for statement in _SCHEMA:
                db.execute(statement)
            self._db = db
        return self._db

    async def _run(self, operation: Callable[..., T], *args: Any) -> T:
        def call() -> T:
            db = self._connection()
            return operation(db, *args)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        except (sqlite3.Error, OSError) as exc:
            raise StateStoreUnavailable(
                f"The key store (SQLite file {self._path}) failed: {exc}. Nothing was changed."
            ) from exc

    async def version(self) -> int:
        return await self._run(_version)

    async def changes(self, since: int) -> KeyChanges:
        return await self._run(_changes, since)

    async def get(self, key_id: str) -> LiveKey | None:
        return await self._run(_get, key_id)

    async def insert(self, key: LiveKey) -> LiveKey:
        return await self._run(_in_transaction, _insert, key)

    async def update(
        self, key_id: str, *, revoked_at_ms: int | None = None, expires_at_ms: int | None = None
    ) -> LiveKey:
        return await self._run(_in_transaction, _update, key_id, revoked_at_ms, expires_at_ms)

    async def rotate(
        self, old_id: str, new: LiveKey, old_expires_at_ms: int, now_ms: int
    ) -> tuple[LiveKey, LiveKey]:
        return await self._run(_in_transaction, _rotate, old_id, new, old_expires_at_ms, now_ms)

    async def aclose(self) -> None:
        def close() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await asyncio.get_running_loop().run_in_executor(self._executor, close)
        self._executor.shutdown(wait=True)


def _in_transaction(db: sqlite3.Connection, operation: Callable[..., T], *args: Any) -> T:
    db.execute("BEGIN IMMEDIATE")
    try:
        result = operation(db, *args)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return result


def _version(db: sqlite3.Connection) -> int:
    row = db.execute("SELECT COALESCE(MAX(version), 0) FROM live_keys").fetchone()
    return int(row[0])


def _key(row: tuple[Any, ...]) -> LiveKey:
    return LiveKey.from_stored(row[0], row[1], row[2], bytes(row[3]), row[4], row[5], row[6])


def _changes(db: sqlite3.Connection, since: int) -> KeyChanges:
    # One read transaction: the version and the rows are of the same moment.
    db.execute("BEGIN")
    try:
        version = _version(db)
        rows = db.execute(
            "SELECT id, tenant, hash, doc, expires_at_ms, revoked_at_ms, version FROM live_keys"
            " WHERE version > ? AND version <= ? ORDER BY version",
            (since, version),
        ).fetchall()
    finally:
        db.execute("COMMIT")
    return KeyChanges(version, tuple(_key(row) for row in rows))


def _get(db: sqlite3.Connection, key_id: str) -> LiveKey | None:
    row = db.execute(
        "SELECT id, tenant, hash, doc, expires_at_ms, revoked_at_ms, version FROM live_keys WHERE id = ?",
        (key_id,),
    ).fetchone()
    return _key(row) if row is not None else None


def _insert(db: sqlite3.Connection, key: LiveKey) -> LiveKey:
    version = _version(db) + 1
    try:
        db.execute(
            "INSERT INTO live_keys (id, tenant, hash, doc, expires_at_ms, revoked_at_ms, version)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (key.id, key.tenant, key.hash, key.fixed_doc(), key.expires_at_ms, key.revoked_at_ms, version),
        )
    except sqlite3.IntegrityError:
        raise KeyConflict(key.id) from None
    stored = _get(db, key.id)
    assert stored is not None
    return stored


def _update(
    db: sqlite3.Connection, key_id: str, revoked_at_ms: int | None, expires_at_ms: int | None
) -> LiveKey:
    found = _get(db, key_id)
    if found is None:
        raise KeyNotFound(key_id)
    revoked = found.revoked_at_ms if found.revoked_at_ms is not None else revoked_at_ms
    expires = _earlier(found.expires_at_ms, expires_at_ms)
    if (revoked, expires) == (found.revoked_at_ms, found.expires_at_ms):
        return found  # nothing changes: no new version
    db.execute(
        "UPDATE live_keys SET revoked_at_ms = ?, expires_at_ms = ?, version = ? WHERE id = ?",
        (revoked, expires, _version(db) + 1, key_id),
    )
    stored = _get(db, key_id)
    assert stored is not None
    return stored


def _rotate(
    db: sqlite3.Connection, old_id: str, new: LiveKey, old_expires_at_ms: int, now_ms: int
) -> tuple[LiveKey, LiveKey]:
    old = _get(db, old_id)
    if old is None:
        raise KeyNotFound(old_id)
    if not old.usable_at(now_ms):
        raise KeyNotUsable(old_id)
    inserted = _insert(db, new)
    updated = _update(db, old_id, None, old_expires_at_ms)
    return updated, inserted


def _earlier(current: int | None, asked: int | None) -> int | None:
    if asked is None:
        return current
    return asked if current is None else min(current, asked)
