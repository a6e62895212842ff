"""The state stores, real: a SQLite file in a temporary directory, the Redis at
127.0.0.1:6379 under a key prefix of the test's own, deleted afterwards, and a throwaway
three-node Redis Cluster (started once for the session)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis

from adapters.state.redis import RedisStore
from adapters.state.sqlite import SQLiteStore
from gateway.ports import StateStore
from tests.metering.redis_cluster import Cluster, redis_cluster

REDIS_URL = "redis://127.0.0.1:6379/0"


def delete_prefix(prefix: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    prefix = f"tgtest-{uuid.uuid4().hex[:12]}"
    yield prefix
    delete_prefix(prefix)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with redis_cluster(tmp_path_factory.mktemp("redis-cluster")) as running:
        yield running


@pytest.fixture(params=["sqlite", "redis", "redis-cluster"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, redis_prefix: str
) -> AsyncIterator[StateStore]:
    made: StateStore
    if request.param == "sqlite":
        made = SQLiteStore(tmp_path / "state.db")
    elif request.param == "redis":
        made = RedisStore(REDIS_URL, redis_prefix)
    else:
        seed: Cluster = request.getfixturevalue("cluster")
        made = RedisStore(seed.url, redis_prefix, cluster=True)
    yield made
    await made.aclose()
