"""The local table of live keys, over a real SQLite store: what it serves after a refresh,
expiry by the clock alone, revocation, tenants that come and go with the config, and a store
whose version went back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.state.redis_keys import RedisKeyStore
from adapters.state.sqlite_keys import SQLiteKeyStore
from gateway.config import RateLimitConfig
from gateway.exchange import Tenant
from gateway.keys import digest_of, generate_key, hash_key, key_id
from gateway.keystore.cache import LiveKeyCache
from gateway.keystore.records import KeyLimits, LiveKey
from gateway.ports import KeyStore
from tests.metering.conftest import REDIS_URL, delete_prefix

NOW = 1_800_000_000_000
TENANTS = {"acme": Tenant("acme"), "beta": Tenant("beta", frozenset({"chat"}))}


class Clock:
    def __init__(self) -> None:
        self.ms = NOW

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteKeyStore]:
    made = SQLiteKeyStore(tmp_path / "state.db")
    yield made
    await made.aclose()


async def stored(store: KeyStore, tenant: str = "acme", **fields: object) -> str:
    secret = generate_key()
    digest = hash_key(secret)
    key = LiveKey(id=key_id(digest), tenant=tenant, hash=digest, created_at_ms=NOW, **fields)  # type: ignore[arg-type]
    await store.insert(key)
    return secret


async def test_a_refresh_serves_the_stores_keys_with_what_they_say(store: SQLiteKeyStore) -> None:
    limits = KeyLimits(rate_limits=RateLimitConfig(requests_per_minute=5))
    secret = await stored(store, label="ci", workflow="nightly", priority="background", limits=limits)
    plain = await stored(store, "beta")
    cache = LiveKeyCache(store, TENANTS, 0.25, Clock())
    assert cache.find(digest_of(secret)) is None
    await cache.refresh()
    principal = cache.find(digest_of(secret))
    assert principal is not None
    assert (principal.tenant, principal.key_id, principal.key_label) == (
        TENANTS["acme"],
        key_id(hash_key(secret)),
        "ci",
    )
    assert (principal.default_workflow, principal.default_priority, principal.limits) == (
        "nightly",
        "background",
        limits,
    )
    beta = cache.find(digest_of(plain))
    assert beta is not None and beta.tenant == TENANTS["beta"] and beta.limits is None
    assert cache.find(digest_of(generate_key())) is None
    assert cache.version == 2


async def test_an_expired_key_is_refused_by_the_clock_alone(store: SQLiteKeyStore) -> None:
    clock = Clock()
    secret = await stored(store, expires_at_ms=NOW + 1000)
    cache = LiveKeyCache(store, TENANTS, 0.25, clock)
    await cache.refresh()
    assert cache.find(digest_of(secret)) is not None
    clock.ms = NOW + 1000
    assert cache.find(digest_of(secret)) is None


async def test_a_revocation_is_served_after_the_next_refresh(store: SQLiteKeyStore) -> None:
    secret = await stored(store)
    other = await stored(store)
    cache = LiveKeyCache(store, TENANTS, 0.25, Clock())
    await cache.refresh()
    await store.update(key_id(hash_key(secret)), revoked_at_ms=NOW)
    await cache.refresh()
    assert cache.find(digest_of(secret)) is None
    assert cache.find(digest_of(other)) is not None
    assert len(cache) == 1


async def test_keys_of_a_tenant_removed_from_the_config_stop_working_and_come_back(
    store: SQLiteKeyStore,
) -> None:
    secret = await stored(store, "beta")
    cache = LiveKeyCache(store, TENANTS, 0.25, Clock())
    await cache.refresh()
    cache.retarget({"acme": TENANTS["acme"]})
    assert cache.find(digest_of(secret)) is None
    renamed = Tenant("beta", None)
    cache.retarget({**TENANTS, "beta": renamed})
    principal = cache.find(digest_of(secret))
    assert principal is not None and principal.tenant is renamed


async def test_a_store_whose_version_went_back_is_read_whole(redis_prefix: str) -> None:
    """Redis restarted without its data (or was flushed): its version starts again from 0."""
    store = RedisKeyStore(REDIS_URL, redis_prefix)
    try:
        old = [await stored(store) for _ in range(3)]
        cache = LiveKeyCache(store, TENANTS, 0.25, Clock())
        await cache.refresh()
        delete_prefix(redis_prefix)
        new = await stored(store)
        await cache.refresh()
        assert cache.version == 1
        assert cache.find(digest_of(new)) is not None
        assert all(cache.find(digest_of(secret)) is None for secret in old)
    finally:
        await store.aclose()
