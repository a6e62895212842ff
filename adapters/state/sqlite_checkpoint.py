"""Checkpoints of the SQLite store's write-ahead log, off the request path.

Left to itself, SQLite checkpoints inside the COMMIT that takes the log past
`wal_autocheckpoint` pages (1,000 by default): that transaction copies every page back
into the database file and syncs both files, so one request in a few hundred waits
10-20 ms, holding the write lock every worker process needs. Here a thread of each store
runs a PASSIVE checkpoint on a connection of its own every `interval_s`: it neither waits
for nor blocks the writers, and the sqlite3 module releases the GIL while it works. The
serving connection's own automatic checkpoint stays on, at `BACKSTOP_PAGES`, in case this
thread falls far behind.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

logger = logging.getLogger("tollgate.state")

BACKSTOP_PAGES = 16_384  # 64 MiB of log at the default page size
_BUSY_TIMEOUT_MS = 1_000


class WalCheckpointer:
    def __init__(self, path: str, interval_s: float) -> None:
        self._path = path
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.checkpoints = 0  # passive checkpoints run (whether or not they reached the end)

    def start(self) -> None:
        if self._thread is None and self._interval_s > 0:
            self._thread = threading.Thread(target=self._run, name="tollgate-sqlite-checkpoint", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        db: sqlite3.Connection | None = None
        failed = False
        try:
            while not self._stop.wait(self._interval_s):
                try:
                    if db is None:
                        db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
                        db.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.checkpoints += 1
                    failed = False
                except sqlite3.Error as exc:
                    if not failed:  # once per run of failures, not once per interval
                        logger.warning(
                            "WAL checkpoint failed; the store checkpoints on commit meanwhile",
                            extra={"error": str(exc)},
                        )
                    failed = True
        finally:
            if db is not None:
                db.close()
