"""The build a process runs (gateway/build.py): compiled or plain, and a stale in-place build."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.build import compiled, stale_compiled


def _touch(path: Path, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    os.utime(path, (mtime, mtime))


def test_a_source_edited_after_its_compiled_module_is_stale(tmp_path: Path) -> None:
    _touch(tmp_path / "gateway/metering/meter.py", 2_000)
    _touch(tmp_path / "gateway/metering/meter.cpython-311-x86_64-linux-gnu.so", 1_000)
    _touch(tmp_path / "gateway/http.py", 1_000)
    _touch(tmp_path / "gateway/http.cpython-311-x86_64-linux-gnu.so", 2_000)
    _touch(tmp_path / "gateway/_native__mypyc.cpython-311-x86_64-linux-gnu.so", 1_000)
    _touch(tmp_path / "adapters/state/redis.py", 3_000)  # never compiled: not stale
    assert stale_compiled(tmp_path) == ["gateway/metering/meter.py"]


def test_a_plain_checkout_has_nothing_stale(tmp_path: Path) -> None:
    _touch(tmp_path / "gateway/http.py", 1_000)
    assert stale_compiled(tmp_path) == []


@pytest.mark.skipif(os.environ.get("TOLLGATE_EXPECT_COMPILED") != "1", reason="scripts/test.sh sets it")
def test_the_suite_runs_the_compiled_request_path() -> None:
    """scripts/test.sh compiles before the tests: they check what the image runs."""
    assert compiled()
