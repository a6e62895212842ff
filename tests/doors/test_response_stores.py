"""The stored-response adapters, real: a SQLite file in a temporary directory and the Redis at
127.0.0.1:6379 under a key prefix of the test's own (deleted afterwards). Both keep a record
until its retention passes, and one tenant never reaches another's records."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from adapters.responses.redis import RedisResponseStore
from adapters.responses.sqlite import SQLiteResponseStore
from gateway.doors.response_store import ResponseRecords, ResponseStore, StoredResponse, store_key
from gateway.errors import StateStoreUnavailable
from gateway.exchange import Principal, Tenant
from simulator import RunningSimulator
from tests.doors.conftest import doors_config
from tests.metering.conftest import REDIS_URL, delete_prefix
from tests.servers import TEST_KEY, running_gateway

ALPHA = Principal(Tenant("alpha"), "k-alpha")
BETA = Principal(Tenant("beta"), "k-beta")


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ResponseStore]:
    if request.param == "sqlite":
        sqlite = SQLiteResponseStore(str(tmp_path / "responses.db"))
        try:
            yield sqlite
        finally:
            await sqlite.aclose()
        return
    prefix = f"tgtest-{uuid.uuid4().hex[:12]}"
    redis_store = RedisResponseStore(REDIS_URL, prefix, 1.0)
    try:
        yield redis_store
    finally:
        await redis_store.aclose()
        delete_prefix(prefix)


async def test_put_get_delete(store: ResponseStore) -> None:
    assert await store.get("k1") is None
    await store.put("k1", b"record one", 60)
    assert await store.get("k1") == b"record one"
    await store.put("k1", b"record two", 60)  # the same key again: replaced
    assert await store.get("k1") == b"record two"
    assert await store.delete("k1") is True
    assert await store.get("k1") is None
    assert await store.delete("k1") is False


async def test_a_record_expires_with_its_retention(store: ResponseStore) -> None:
    await store.put("short", b"gone soon", 1)
    await store.put("long", b"stays", 60)
    deadline = time.monotonic() + 5
    while await store.get("short") is not None:
        assert time.monotonic() < deadline, "the record outlived its retention"
        await store.put("tick", b"", 60)  # SQLite deletes what has expired as it writes
    assert await store.get("long") == b"stays"
    assert await store.delete("short") is False


async def test_records_are_tenant_scoped_and_redacted(store: ResponseStore) -> None:
    records = ResponseRecords(store, 60, _mask)
    stored = StoredResponse(
        {"id": "resp_1", "output": "secret-42"}, [{"role": "user", "content": "secret-42"}]
    )
    await records.save(ALPHA, "resp_1", stored)
    loaded = await records.load(ALPHA, "resp_1")
    assert loaded == StoredResponse(
        {"id": "resp_1", "output": "[MASKED]"}, [{"role": "user", "content": "[MASKED]"}]
    )
    assert await records.load(BETA, "resp_1") is None
    assert await records.delete(BETA, "resp_1") is False
    assert store_key(ALPHA, "resp_1") != store_key(BETA, "resp_1")
    assert "resp_1" not in store_key(ALPHA, "resp_1")
    assert await records.delete(ALPHA, "resp_1") is True


async def test_an_unreachable_redis_is_a_state_store_error() -> None:
    unreachable = RedisResponseStore("redis://127.0.0.1:1/0", "tgtest-none", 0.2)
    try:
        with pytest.raises(StateStoreUnavailable):
            await unreachable.get("k")
    finally:
        await unreachable.aclose()


def _mask(value: object) -> object:
    if isinstance(value, dict):
        return {k: _mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    return "[MASKED]" if isinstance(value, str) and "secret" in value else value


def test_two_replicas_share_conversations_through_redis(
    upstream_sim: RunningSimulator, tmp_path: Path
) -> None:
    """A conversation begun on one gateway continues on another, as behind a load balancer."""
    prefix = f"tgtest-{uuid.uuid4().hex[:12]}"
    store = {"store": "redis", "redis_url": REDIS_URL, "key_prefix": prefix}
    try:
        with (
            running_gateway(doors_config(upstream_sim, tmp_path / "a.db", responses=store)) as first,
            running_gateway(doors_config(upstream_sim, tmp_path / "b.db", responses=store)) as second,
            openai.OpenAI(base_url=first.base_url, api_key=TEST_KEY, max_retries=0) as on_first,
            openai.OpenAI(base_url=second.base_url, api_key=TEST_KEY, max_retries=0) as on_second,
        ):
            begun = on_first.responses.create(model="chat", input="hello")
            continued = on_second.responses.create(
                model="chat", input="and more", previous_response_id=begun.id
            )
            assert on_second.responses.retrieve(continued.id).previous_response_id == begun.id
            on_first.responses.delete(continued.id)
            with pytest.raises(openai.NotFoundError):
                on_second.responses.retrieve(continued.id)
        assert not (tmp_path / "a.db").exists()  # nothing went to the SQLite default
    finally:
        delete_prefix(prefix)
