"""Both state stores, real: a SQLite file in a temporary directory, and the Redis at
127.0.0.1:6379 under a key prefix of the test's own, deleted afterwards."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis

from adapters.state.redis import RedisStore
from adapters.state.sqlite import SQLiteStore
from gateway.ports import StateStore

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


@pytest.fixture(params=["sqlite", "redis"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, redis_prefix: str
) -> AsyncIterator[StateStore]:
    made: StateStore
    if request.param == "sqlite":
        made = SQLiteStore(tmp_path / "state.db")
    else:
        made = RedisStore(REDIS_URL, redis_prefix)
    yield made
    await made.aclose()
