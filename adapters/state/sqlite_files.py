"""How every SQLite store of the gateway opens its file: one connection per store thread,
autocommit (each store runs its own `BEGIN`), write-ahead log, and a busy timeout for the
other processes' write locks.

Switching a new file to the write-ahead log needs the file to itself, and SQLite answers
"database is locked" at once, without its busy handler, when another process opening the
same file holds it for that moment (every worker of a fresh gateway opens the file at the
same time). So the switch is tried again, backing off, for as long as the busy timeout."""

from __future__ import annotations

import sqlite3
import time

_FIRST_PAUSE_S = 0.001
_LONGEST_PAUSE_S = 0.05


def open_wal(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        db.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        _enter_wal(db, path, busy_timeout_ms / 1000)
        db.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        db.close()
        raise
    return db


def _enter_wal(db: sqlite3.Connection, path: str, patience_s: float) -> None:
    deadline = time.monotonic() + patience_s
    pause = _FIRST_PAUSE_S
    while True:
        try:
            [mode] = db.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        else:
            if str(mode).lower() == "wal":
                return
            if time.monotonic() >= deadline:
                raise sqlite3.OperationalError(f"{path} could not be switched to WAL (journal mode {mode})")
        time.sleep(pause)
        pause = min(pause * 2, _LONGEST_PAUSE_S)
