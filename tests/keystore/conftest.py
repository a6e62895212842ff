"""Key stores, real: a SQLite file in a temporary directory, the Redis at 127.0.0.1:6379
under a key prefix of the test's own (deleted afterwards), and the throwaway Redis Cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.state.redis_keys import RedisKeyStore
from adapters.state.sqlite_keys import SQLiteKeyStore
from gateway.ports import KeyStore
from tests.metering.conftest import REDIS_URL, cluster, redis_prefix
from tests.metering.redis_cluster import Cluster

__all__ = ["cluster", "key_store", "redis_prefix"]  # the metering tests' fixtures, shared


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
