"""Every worker of a fresh gateway opens the same new SQLite file at once; each must come
up on the write-ahead log, none with "database is locked"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import adapters.state.sqlite_files

ROUNDS = 30
OPENERS = 4

# A fresh interpreter per opener (no fork of this process: its threads, other tests' servers,
# could hold a lock the child would inherit), loading the module by its file alone (no package
# imports), waiting on its stdin so that all of a round's openers start together.
OPENER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("sqlite_files", sys.argv[1])
files = importlib.util.module_from_spec(spec)
spec.loader.exec_module(files)
print("ready", flush=True)
sys.stdin.readline()
try:
    db = files.open_wal(sys.argv[2], 10_000)
    [mode] = db.execute("PRAGMA journal_mode").fetchone()
    db.execute("BEGIN IMMEDIATE")
    db.execute("COMMIT")
    db.close()
    print(mode)
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}")
"""


def test_processes_opening_one_new_file_at_once_all_get_the_write_ahead_log(tmp_path: Path) -> None:
    # One round in several failed before the switch to WAL was retried: SQLite refuses it at
    # once, without its busy handler, while another opener holds the file.
    module = adapters.state.sqlite_files.__file__
    assert module is not None
    modes: list[str] = []
    for round_ in range(ROUNDS):
        path = str(tmp_path / f"state-{round_}.db")
        openers = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, module, path],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(OPENERS)
        ]
        try:
            for opener in openers:
                assert opener.stdout is not None and opener.stdout.readline().strip() == "ready"
            for opener in openers:
                assert opener.stdin is not None
                opener.stdin.write("go\n")
                opener.stdin.flush()
            for opener in openers:
                out, _ = opener.communicate(timeout=60)
                modes.append(out.strip())
        finally:
            for opener in openers:
                if opener.poll() is None:
                    opener.kill()
                    opener.wait()
    assert set(modes) == {"wal"}, [mode for mode in modes if mode != "wal"]
