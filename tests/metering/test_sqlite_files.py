"""Every worker of a fresh gateway opens the same new SQLite file at once; each must come
up on the write-ahead log, none with "database is locked"."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from adapters.state.sqlite_files import open_wal

ROUNDS = 30
OPENERS = 4


def _open(path: str, start: multiprocessing.synchronize.Barrier, answers: multiprocessing.Queue[str]) -> None:
    try:
        start.wait()
        db = open_wal(path, 10_000)
        [mode] = db.execute("PRAGMA journal_mode").fetchone()
        db.execute("BEGIN IMMEDIATE")
        db.execute("COMMIT")
        db.close()
        answers.put(mode)
    except Exception as exc:  # the answer the test reports
        answers.put(f"{type(exc).__name__}: {exc}")


def test_processes_opening_one_new_file_at_once_all_get_the_write_ahead_log(tmp_path: Path) -> None:
    # One round in several failed before the switch to WAL was retried: SQLite refuses it at
    # once, without its busy handler, while another opener holds the file.
    spawn = multiprocessing.get_context("fork")
    modes: list[str] = []
    for round_ in range(ROUNDS):
        path = str(tmp_path / f"state-{round_}.db")
        start = spawn.Barrier(OPENERS)
        answers: multiprocessing.Queue[str] = spawn.Queue()
        openers = [spawn.Process(target=_open, args=(path, start, answers)) for _ in range(OPENERS)]
        for opener in openers:
            opener.start()
        try:
            modes += [answers.get(timeout=60) for _ in openers]
        finally:
            for opener in openers:
                opener.join(timeout=10)
                if opener.is_alive():
                    opener.kill()
    assert set(modes) == {"wal"}, [mode for mode in modes if mode != "wal"]
