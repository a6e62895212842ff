"""How every SQLite store of the gateway opens its file: one connection per store thread,
autocommit (each store runs its own `BEGIN`), write-ahead log, and a busy timeout for the
other processes' write locks."""

from __future__ import annotations

import sqlite3


def open_wal(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    return db
