"""The embedded decision log: an append-only JSONL file, one sealed record per line.

Several gateway processes may share one file. Each batch is written under an exclusive
`flock`: the writer reads the chain's head from the file's last line (skipped when the
file is exactly as this writer left it), seals the batch onto it and appends it with
one `write` on a descriptor opened O_APPEND. With fsync on, the file is then fsynced
(outside the lock: an fsync covers whatever the file holds by then): with `fsync_interval_s`
0, before `write` returns (a mandatory log: its request waits for it); otherwise in the
background, at most once per interval, one fsync for every batch written meanwhile
(group commit), and at `aclose`.

A batch is appended on the event loop when the lock is free at once (a page-cache write
of one batch), and in a worker thread when another process holds it; an fsync always runs
in a worker thread. A thread costs a busy event loop far more than its own work (while it
waits for the GIL after a blocking call, each release of it by the loop, around every I/O
callback, can wake it to try), so the hops are kept few (docs/benchmarks.md, "Decision log").

A line torn by a crash (no final newline) is left in place and reported by `verify`; new
records continue the chain from the last complete line, on a fresh line.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from gateway.audit.chain import ChainHead, head_of, sealed_line
from gateway.audit.verify import Report, verify_chain

_TAIL_BLOCK = 64 * 1024

logger = logging.getLogger("tollgate.audit")


class AuditLogCorrupt(Exception):
    """The log's last complete line is not a sealed record: nothing can be chained onto it."""


class JsonlWriter:
    def __init__(self, path: str | Path, *, fsync: bool = True, fsync_interval_s: float = 0.0) -> None:
        self._path = Path(path)
        self._fsync = fsync
        self._fsync_interval_s = fsync_interval_s
        self._fd: int | None = None
        self._head: ChainHead | None = None
        self._size_after_write = -1  # the file's size when this writer last wrote
        self._unsynced = False  # written since the last fsync began (group commit)
        self._syncer: asyncio.Task[None] | None = None

    async def write(self, records: list[dict[str, Any]]) -> None:
        if not self._append(records, wait=False):
            await asyncio.to_thread(self._append, records, wait=True)
        fd = self._fd
        if not self._fsync or fd is None:
            return
        if self._fsync_interval_s <= 0:
            await asyncio.to_thread(os.fsync, fd)
            return
        self._unsynced = True
        if self._syncer is None:
            self._syncer = asyncio.get_running_loop().create_task(self._sync_later(fd), name="audit-fsync")

    async def aclose(self) -> None:
        syncer, self._syncer = self._syncer, None
        if syncer is not None:
            syncer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await syncer
        fd, self._fd = self._fd, None
        if fd is not None:
            if self._fsync and self._fsync_interval_s > 0:
                await asyncio.to_thread(os.fsync, fd)  # what the last interval wrote
            await asyncio.to_thread(os.close, fd)

    async def _sync_later(self, fd: int) -> None:
        """fsyncs while batches are written, at most once per interval."""
        try:
            while self._unsynced:
                await asyncio.sleep(self._fsync_interval_s)
                self._unsynced = False
                try:
                    await asyncio.to_thread(os.fsync, fd)
                except OSError:
                    logger.exception("audit log fsync failed", extra={"path": str(self._path)})
        finally:
            self._syncer = None

    def _append(self, records: list[dict[str, Any]], *, wait: bool) -> bool:
        """Appends the batch under the file's lock; without `wait`, only if the lock is free
        at once (False: nothing was written)."""
        if self._fd is None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fd = self._fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            size = os.fstat(fd).st_size
            head, torn = self._head, False
            if head is None or size != self._size_after_write:
                head, torn = read_head(self._path)
            lines = [b"\n"] if torn else []
            for record in records:
                line, head = sealed_line(record, head)
                lines.append(line)
                lines.append(b"\n")
            data = b"".join(lines)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)  # not in the slice: compiled, its bounds are evaluated twice
                view = view[written:]
        except BaseException:
            self._head = None
            raise
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        self._head, self._size_after_write = head, size + len(data)
        return True


def read_head(path: Path) -> tuple[ChainHead, bool]:
    """The head of the chain stored in `path`, and whether the file ends in a torn line."""
    try:
        file = path.open("rb")
    except FileNotFoundError:
        return ChainHead(), False
    with file:
        end = file.seek(0, os.SEEK_END)
        if end == 0:
            return ChainHead(), False
        file.seek(end - 1)
        torn = file.read(1) != b"\n"
        buffer, position = b"", end
        while position > 0:
            step = min(_TAIL_BLOCK, position)
            position -= step
            file.seek(position)
            buffer = file.read(step) + buffer
            last_newline = buffer.rfind(b"\n")
            if last_newline == -1:
                continue
            start = buffer.rfind(b"\n", 0, last_newline)
            if start != -1 or position == 0:
                return _head_of_line(path, buffer[start + 1 : last_newline]), torn
        return ChainHead(), torn


def _head_of_line(path: Path, line: bytes) -> ChainHead:
    try:
        record = orjson.loads(line)
        return head_of(record if isinstance(record, dict) else {})
    except (orjson.JSONDecodeError, ValueError):
        raise AuditLogCorrupt(f"{path}: the last line is not a sealed audit record") from None


def read_lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as file:
        yield from file


def verify_file(path: str | Path) -> Report:
    """Verify the chain in a JSONL log (blocking; for the CLI)."""
    return verify_chain(read_lines(Path(path)))
