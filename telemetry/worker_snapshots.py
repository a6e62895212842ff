"""How the workers of one server see each other's metrics: a snapshot file per worker.

`tollgate serve` makes a fresh directory before the workers start and names it in
TOLLGATE_METRICS_DIR (see gateway/config.py). Each worker replaces its own file
(`<pid>.json`, written whole then renamed, so a reader never sees half of one) every
`metrics.snapshot_interval_s`; the worker that answers /metrics reads the others' files and
merges them with its own live figures. Without a directory a worker shows its own only.
A worker that exits leaves its last file: its counters stay counted, its gauges are ignored.

The methods here do file I/O: call them in a thread (`asyncio.to_thread`), never on the loop.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from telemetry.exposition import Snapshot


class WorkerSnapshots:
    def __init__(self, directory: Path, pid: int | None = None) -> None:
        self._dir = directory
        self._pid = os.getpid() if pid is None else pid
        self._path = directory / f"{self._pid}.json"

    def write(self, data: bytes) -> None:
        partial = self._dir / f".{self._pid}.json.tmp"
        partial.write_bytes(data)
        os.replace(partial, self._path)

    def read_others(self) -> list[Snapshot]:
        snapshots = []
        for path in self._dir.glob("*.json"):
            if path == self._path or not path.stem.isdigit():
                continue
            try:
                data = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                continue  # removed meanwhile, or not ours
            if isinstance(data, dict):
                snapshots.append(Snapshot(data, _alive(int(path.stem))))
        return snapshots


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
