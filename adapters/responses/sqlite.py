"""Stored responses in one SQLite file (WAL mode), shared by the worker processes of a machine.

sqlite3 blocks, so every call runs on one dedicated thread per store; the file is opened at
the first call, so a gateway whose clients never store a response never creates it. Expired
records are never returned, and are deleted as new ones are written.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from adapters.state.sqlite_files import open_wal
from gateway.errors import StateStoreUnavailable

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, expires_at REAL NOT NULL, record BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS responses_expiry ON responses (expires_at);
"""
_BUSY_TIMEOUT_MS = 10_000


class SQLiteResponseStore:
    def __init__(self, path: str) -> None:
        self._path = path
        self._db: sqlite3.Connection | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tollgate-responses")

    async def put(self, key: str, record: bytes, ttl_s: int) -> None:
        await self._run(self._put, key, record, ttl_s)

    async def get(self, key: str) -> bytes | None:
        found: bytes | None = await self._run(self._get, key)
        return found

    async def delete(self, key: str) -> bool:
        deleted: bool = await self._run(self._delete, key)
        return deleted

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._close)
        self._thread.shutdown(wait=True)

    async def _run(self, call: Any, *args: Any) -> Any:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, call, *args)
        except sqlite3.Error as exc:
            raise StateStoreUnavailable(
                f"The stored responses cannot be reached: {type(exc).__name__}."
            ) from exc

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            db = open_wal(self._path, _BUSY_TIMEOUT_MS)
            db.executescript(_SCHEMA)
            self._db = db
        return self._db

    def _put(self, key: str, record: bytes, ttl_s: int) -> None:
        db = self._connection()
        now = time.time()
        with db:
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM responses WHERE expires_at <= ?", (now,))
            db.execute(
                "INSERT OR REPLACE INTO responses (key, expires_at, record) VALUES (?, ?, ?)",
                (key, now + ttl_s, record),
            )

    def _get(self, key: str) -> bytes | None:
        row = (
            self._connection()
            .execute("SELECT record FROM responses WHERE key = ? AND expires_at > ?", (key, time.time()))
            .fetchone()
        )
        return bytes(row[0]) if row is not None else None

    def _delete(self, key: str) -> bool:
        cursor = self._connection().execute(
            "DELETE FROM responses WHERE key = ? AND expires_at > ?", (key, time.time())
        )
        return cursor.rowcount > 0

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
