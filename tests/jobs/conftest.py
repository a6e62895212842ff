"""Job stores, real: a SQLite file in a temporary directory, and the Redis at 127.0.0.1:6379
under a key prefix of the test's own, deleted afterwards."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from adapters.state.redis_jobs import RedisJobStore
from adapters.state.sqlite_jobs import SQLiteJobStore
from gateway.jobs.store import JobStore
from tests.metering.conftest import REDIS_URL, delete_prefix


class Clock:
    """Real time, plus an offset a test moves forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def jobs_prefix() -> Iterator[str]:
    prefix = f"tgjobs-{uuid.uuid4().hex[:12]}"
    yield prefix
    delete_prefix(prefix)


@pytest.fixture(params=["sqlite", "redis"])
async def job_store(
    request: pytest.FixtureRequest, tmp_path: Path, jobs_prefix: str, clock: Clock
) -> AsyncIterator[JobStore]:
    made: JobStore
    if request.param == "sqlite":
        made = SQLiteJobStore(tmp_path / "jobs.db", clock=clock)
    else:
        made = RedisJobStore(REDIS_URL, jobs_prefix, clock=clock)
    try:
        yield made
    finally:
        await made.aclose()
