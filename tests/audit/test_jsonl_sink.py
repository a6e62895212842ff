"""The queued sink over the JSONL file: records are written off the request path, chained
across restarts and across processes sharing one file; a full queue drops and counts; a
mandatory log fails the request closed."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from adapters.audit.jsonl import JsonlWriter, verify_file
from gateway.audit.queued_sink import QueuedSink
from gateway.errors import AuditWriteFailed
from tests.processes import START_TIMEOUT_S


def _record(n: int, **extra: Any) -> dict[str, Any]:
    return {"v": 1, "type": "decision", "decision_id": f"d{n}", "request_id": f"r{n}", **extra}


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


async def test_records_are_written_chained_and_verifiable(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = QueuedSink(JsonlWriter(path))
    for n in range(1, 51):
        await sink.append(_record(n))
    await sink.aclose()
    records = _lines(path)
    assert [r["decision_id"] for r in records] == [f"d{n}" for n in range(1, 51)]
    assert [r["seq"] for r in records] == list(range(1, 51))
    assert sink.written == 50
    report = verify_file(path)
    assert report.ok
    assert report.records == 50
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("fsync", [True, False])
async def test_a_restarted_writer_continues_the_chain(tmp_path: Path, fsync: bool) -> None:
    path = tmp_path / "logs" / "audit.jsonl"  # the folder is created
    for run in range(3):
        sink = QueuedSink(JsonlWriter(path, fsync=fsync))
        for n in range(5):
            await sink.append(_record(run * 5 + n))
        await sink.aclose()
    assert [r["seq"] for r in _lines(path)] == list(range(1, 16))
    assert verify_file(path).ok


async def test_a_torn_last_line_is_kept_and_reported_and_the_chain_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = QueuedSink(JsonlWriter(path))
    await sink.append(_record(1))
    await sink.append(_record(2))
    await sink.aclose()
    with path.open("ab") as file:
        file.write(b'{"v":1,"type":"decis')  # a crash mid-write
    sink = QueuedSink(JsonlWriter(path))
    await sink.append(_record(3))
    await sink.aclose()
    lines = path.read_bytes().splitlines()
    assert lines[2] == b'{"v":1,"type":"decis'
    assert orjson.loads(lines[3])["seq"] == 3
    report = verify_file(path)
    assert report.problem is not None
    assert (report.problem.position, report.problem.kind) == (3, "unreadable")


async def test_mandatory_append_returns_once_the_record_is_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = QueuedSink(JsonlWriter(path), mandatory=True)
    for n in range(3):
        await sink.append(_record(n))
        assert len(_lines(path)) == n + 1
    await sink.aclose()


async def test_a_mandatory_log_that_cannot_be_written_fails_the_request(tmp_path: Path) -> None:
    sink = QueuedSink(JsonlWriter(tmp_path), mandatory=True)  # a directory: open() fails
    with pytest.raises(AuditWriteFailed) as caught:
        await sink.append(_record(1))
    assert caught.value.status == 503
    assert sink.failed == 1
    await sink.aclose()


async def test_a_log_whose_last_line_is_not_a_record_is_not_extended(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"this is not a record\n")
    sink = QueuedSink(JsonlWriter(path), mandatory=True)
    with pytest.raises(AuditWriteFailed):
        await sink.append(_record(1))
    await sink.aclose()
    assert path.read_bytes() == b"this is not a record\n"


async def test_an_optional_log_that_cannot_be_written_never_fails_the_request(tmp_path: Path) -> None:
    sink = QueuedSink(JsonlWriter(tmp_path))
    await sink.append(_record(1))
    await sink.aclose()
    assert (sink.written, sink.failed) == (0, 1)


async def test_a_full_queue_drops_counts_and_alerts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "audit.jsonl"
    sink = QueuedSink(JsonlWriter(path), queue_size=2)
    with caplog.at_level(logging.ERROR, logger="tollgate.audit"):
        # No await yields to the writer between these appends: the queue holds two.
        for n in range(6):
            await sink.append(_record(n))
    assert sink.dropped == 4
    assert [r.getMessage() for r in caplog.records] == [
        "audit queue full: records dropped"
    ] * 3  # 1st, 2nd, 4th
    await sink.aclose()
    assert [r["decision_id"] for r in _lines(path)] == ["d0", "d1"]
    assert verify_file(path).ok


async def test_records_are_prepared_before_they_are_written(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"

    def scrub(record: dict[str, Any]) -> dict[str, Any]:
        if record.get("secret") == "explode":
            raise ValueError("cannot scrub")
        return {**record, "secret": "[SCRUBBED]"}

    sink = QueuedSink(JsonlWriter(path), prepare=scrub)
    await sink.append(_record(1, secret="sk-live-123"))
    await sink.append(_record(2, secret="explode"))
    await sink.append(_record(3, secret="sk-live-456"))
    await sink.aclose()
    assert [(r["decision_id"], r["secret"]) for r in _lines(path)] == [
        ("d1", "[SCRUBBED]"),
        ("d3", "[SCRUBBED]"),
    ]
    assert (sink.written, sink.failed) == (2, 1)
    assert b"sk-live" not in path.read_bytes()


async def test_two_writers_on_one_file_keep_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sinks = [QueuedSink(JsonlWriter(path), batch_size=3) for _ in range(2)]
    for n in range(40):
        await sinks[n % 2].append(_record(n))
    for sink in sinks:
        await sink.aclose()
    assert verify_file(path).records == 40


_CHILD = """
import asyncio, pathlib, sys, time
from adapters.audit.jsonl import JsonlWriter
from gateway.audit.queued_sink import QueuedSink

async def main() -> None:
    sink = QueuedSink(JsonlWriter(sys.argv[1]), batch_size=1)
    while not pathlib.Path(sys.argv[3]).exists():  # start together, so that the writes contend
        time.sleep(0.001)
    for n in range(300):
        await sink.append({"v": 1, "type": "decision", "writer": sys.argv[2], "n": n})
        await asyncio.sleep(0)
    await sink.aclose()

asyncio.run(main())
"""


def test_processes_sharing_one_file_keep_one_chain(tmp_path: Path) -> None:
    path, go = tmp_path / "audit.jsonl", tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(path), str(i), str(go)], cwd=Path(__file__).parents[2]
        )
        for i in range(3)
    ]
    try:
        go.touch()
        assert [child.wait(timeout=START_TIMEOUT_S) for child in children] == [0, 0, 0]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    report = verify_file(path)
    assert report.ok, report.problem
    assert report.records == 900
    assert sorted((r["writer"], r["n"]) for r in _lines(path)) == sorted(
        (str(i), n) for i in range(3) for n in range(300)
    )
