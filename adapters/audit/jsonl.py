"""The embedded decision log: an append-only JSONL file, one sealed record per line.

Several gateway processes may share one file. Each batch is written under an exclusive
`flock`: the writer reads the chain's head from the file's last line (skipped when the
file is exactly as this writer left it), seals the batch onto it and appends it with
one `write` on a descriptor opened O_APPEND, then fsyncs if configured. All file work
runs in a worker thread, never on the event loop.

A line torn by a crash (no final newline) is left in place and reported by `verify`; new
records continue the chain from the last complete line, on a fresh line.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from gateway.audit.chain import ChainHead, canonical, head_of, seal
from gateway.audit.verify import Report, verify_chain

_TAIL_BLOCK = 64 * 1024


class AuditLogCorrupt(Exception):
    """The log's last complete line is not a sealed record: nothing can be chained onto it."""


class JsonlWriter:
    def __init__(self, path: str | Path, *, fsync: bool = True) -> None:
        self._path = Path(path)
        self._fsync = fsync
        self._fd: int | None = None
        self._head: ChainHead | None = None
        self._size_after_write = -1  # the file's size when this writer last wrote

    async def write(self, records: list[dict[str, Any]]) -> None:
        await asyncio.to_thread(self._write_locked, records)

    async def aclose(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            await asyncio.to_thread(os.close, fd)

    def _write_locked(self, records: list[dict[str, Any]]) -> None:
        if self._fd is None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fd = self._fd
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(fd).st_size
            head, torn = self._head, False
            if head is None or size != self._size_after_write:
                head, torn = read_head(self._path)
            lines = [b"\n"] if torn else []
            for record in records:
                sealed, head = seal(record, head)
                lines.append(canonical(sealed) + b"\n")
            data = b"".join(lines)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if self._fsync:
                os.fsync(fd)
        except BaseException:
            self._head = None
            raise
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        self._head, self._size_after_write = head, size + len(data)


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
