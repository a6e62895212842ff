"""Key stores, real: a SQLite file in a temporary directory, the Redis at 127.0.0.1:6379
under a key prefix of the test's own (deleted afterwards), and the throwaway Redis Cluster."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from adapters.state.redis_keys import RedisKeyStore
from adapters.state.sqlite_keys import SQLiteKeyStore
from gateway.ports import KeyStore
from tests.metering.conftest import REDIS_URL, delete_prefix
from tests.metering.redis_cluster import Cluster, redis_cluster


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
async def key_store(
    request: pytest.FixtureRequest, tmp_path: Path, redis_prefix: str
) -> AsyncIterator[KeyStore]:
    made: KeyStore
    if request.param == "sqlite":
        made = SQLiteKeyStore(tmp_path / "state.db")
    elif request.param == "redis":
        made = RedisKeyStore(REDIS_URL, redis_prefix)
    else:
        seed: Cluster = request.getfixturevalue("cluster")
        made = RedisKeyStore(seed.url, redis_prefix, cluster=True)
    yield made
    await made.aclose()
