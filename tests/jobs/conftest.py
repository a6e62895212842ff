"""Job stores, real: a SQLite file in a temporary directory, the Redis at 127.0.0.1:6379
under a key prefix of the test's own (deleted afterwards), and a throwaway three-node Redis
Cluster (the metering tests' `cluster`, started once for the session)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from adapters.state.redis_jobs import RedisJobStore
from adapters.state.sqlite_jobs import SQLiteJobStore
from gateway.jobs.store import JobStore
from simulator import RunningSimulator, SimConfig, Simulator
from tests.metering.conftest import REDIS_URL, cluster, delete_prefix
from tests.metering.redis_cluster import Cluster
from tests.servers import UPSTREAM_KEY

__all__ = ["cluster"]  # the metering tests' fixture, shared


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    """The upstream of a module's gateway (a module with other needs defines its own)."""
    running = Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY))
    yield running
    running.stop()


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


@pytest.fixture(params=["sqlite", "redis", "redis-cluster"])
async def job_store(
    request: pytest.FixtureRequest, tmp_path: Path, jobs_prefix: str, clock: Clock
) -> AsyncIterator[JobStore]:
    made: JobStore
    if request.param == "sqlite":
        made = SQLiteJobStore(tmp_path / "jobs.db", clock=clock)
    elif request.param == "redis":
        made = RedisJobStore(REDIS_URL, jobs_prefix, clock=clock)
    else:
        seed: Cluster = request.getfixturevalue("cluster")
        made = RedisJobStore(seed.url, jobs_prefix, clock=clock, cluster=True)
    try:
        yield made
    finally:
        await made.aclose()
