"""When the JSONL decision log reaches the disk: a mandatory log's batch is fsynced before
`write` returns; the other batches are fsynced together in the background, at most once per
interval, and what is still unsynced at `aclose`, then. fsync itself is the operating
system's: the tests count its calls, and let every one through."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from adapters.audit import build_audit_writer, jsonl
from adapters.audit.jsonl import JsonlWriter, verify_file
from gateway.config import AuditConfig


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counted(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(jsonl.os, "fsync", counted)
    return calls


def _records(start: int, count: int) -> list[dict[str, Any]]:
    return [{"v": 1, "type": "decision", "decision_id": f"d{n}"} for n in range(start, start + count)]


async def test_without_an_interval_each_batch_is_on_disk_before_write_returns(
    tmp_path: Path, fsyncs: list[int]
) -> None:
    writer = JsonlWriter(tmp_path / "audit.jsonl")
    for batch in range(3):
        await writer.write(_records(batch * 2, 2))
        assert len(fsyncs) == batch + 1
    await writer.aclose()
    assert len(fsyncs) == 3  # nothing left to sync at close


async def test_batches_written_within_an_interval_share_one_fsync(tmp_path: Path, fsyncs: list[int]) -> None:
    path = tmp_path / "audit.jsonl"
    writer = JsonlWriter(path, fsync_interval_s=0.2)
    for batch in range(5):
        await writer.write(_records(batch * 3, 3))
    assert fsyncs == []  # written, not yet synced: write did not wait
    assert len(path.read_bytes().splitlines()) == 15
    for _ in range(200):
        if fsyncs:
            break
        await asyncio.sleep(0.01)
    assert len(fsyncs) == 1
    await asyncio.sleep(0.3)  # nothing written since: no other fsync
    assert len(fsyncs) == 1
    await writer.write(_records(15, 1))
    await writer.aclose()  # what the interval holds is synced at close, not dropped
    assert len(fsyncs) == 2
    assert verify_file(path).records == 16


async def test_a_writer_closed_before_its_interval_ends_syncs_at_close(
    tmp_path: Path, fsyncs: list[int]
) -> None:
    writer = JsonlWriter(tmp_path / "audit.jsonl", fsync_interval_s=60)
    await writer.write(_records(0, 4))
    assert fsyncs == []
    await writer.aclose()
    assert len(fsyncs) == 1


async def test_without_fsync_nothing_is_synced(tmp_path: Path, fsyncs: list[int]) -> None:
    writer = JsonlWriter(tmp_path / "audit.jsonl", fsync=False, fsync_interval_s=0.01)
    await writer.write(_records(0, 2))
    await asyncio.sleep(0.05)
    await writer.aclose()
    assert fsyncs == []


@pytest.mark.parametrize("mandatory", [False, True])
async def test_the_configured_log_syncs_a_mandatory_batch_at_once(
    tmp_path: Path, fsyncs: list[int], mandatory: bool
) -> None:
    writer = build_audit_writer(AuditConfig(path=str(tmp_path / "audit.jsonl"), mandatory=mandatory))
    await writer.write(_records(0, 1))
    assert len(fsyncs) == (1 if mandatory else 0)
    await writer.aclose()
    assert len(fsyncs) == 1
