"""One contract for every key store (SQLite, Redis, Redis Cluster): versions, changes since a
version, revocation, expiry that only moves earlier, and rotation as one step."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.config import BudgetConfig, RateLimitConfig
from gateway.keys import generate_key, hash_key, key_id
from gateway.keystore.records import KeyConflict, KeyLimits, KeyNotFound, KeyNotUsable, LiveKey
from gateway.ports import KeyStore

NOW = 1_800_000_000_000


def new_key(tenant: str = "acme", **fields: object) -> LiveKey:
    digest = hash_key(generate_key())
    return LiveKey(id=key_id(digest), tenant=tenant, hash=digest, created_at_ms=NOW, **fields)  # type: ignore[arg-type]


async def test_an_empty_store_is_at_version_zero(key_store: KeyStore) -> None:
    assert await key_store.version() == 0
    changes = await key_store.changes(0)
    assert (changes.version, changes.keys) == (0, ())
    assert await key_store.get("000000000000") is None


async def test_a_key_reads_back_as_stored_with_its_fixed_parts(key_store: KeyStore) -> None:
    limits = KeyLimits(
        (BudgetConfig(window="day", usd=5.0), BudgetConfig(window="month", tokens=1000, kind="soft")),
        RateLimitConfig(requests_per_minute=10),
    )
    key = new_key(
        label="ci",
        labels=(("env", "prod"), ("team", "search")),
        workflow="batch",
        priority="critical",
        limits=limits,
        created_by="admin:abc",
        expires_at_ms=NOW + 5,
    )
    stored = await key_store.insert(key)
    assert stored == dataclasses.replace(key, version=1)
    assert await key_store.get(key.id) == stored
    assert await key_store.version() == 1


async def test_an_id_is_stored_once(key_store: KeyStore) -> None:
    key = new_key()
    await key_store.insert(key)
    with pytest.raises(KeyConflict):
        await key_store.insert(key)
    assert await key_store.version() == 1


async def test_changes_since_a_version_hold_only_what_changed_after_it(key_store: KeyStore) -> None:
    first, second, third = new_key(), new_key("beta"), new_key()
    for key in (first, second, third):
        await key_store.insert(key)
    await key_store.update(first.id, revoked_at_ms=NOW + 1)
    changes = await key_store.changes(2)
    assert changes.version == 4
    assert {k.id: k.version for k in changes.keys} == {third.id: 3, first.id: 4}
    [revoked] = [k for k in changes.keys if k.id == first.id]
    assert revoked.revoked_at_ms == NOW + 1
    assert {k.id for k in (await key_store.changes(0)).keys} == {first.id, second.id, third.id}
    assert (await key_store.changes(4)).keys == ()


async def test_revocation_keeps_its_first_time_and_expiry_only_moves_earlier(key_store: KeyStore) -> None:
    key = new_key(expires_at_ms=NOW + 10_000)
    await key_store.insert(key)
    later = await key_store.update(key.id, expires_at_ms=NOW + 20_000)
    assert (later.expires_at_ms, later.version) == (NOW + 10_000, 1)  # unchanged: no new version
    earlier = await key_store.update(key.id, expires_at_ms=NOW + 5_000)
    assert (earlier.expires_at_ms, earlier.version) == (NOW + 5_000, 2)
    revoked = await key_store.update(key.id, revoked_at_ms=NOW + 1)
    again = await key_store.update(key.id, revoked_at_ms=NOW + 2)
    assert revoked.revoked_at_ms == again.revoked_at_ms == NOW + 1
    assert again.version == 3
    with pytest.raises(KeyNotFound):
        await key_store.update("000000000000", revoked_at_ms=NOW)


async def test_a_rotation_adds_the_new_key_and_ends_the_old_one_in_one_step(key_store: KeyStore) -> None:
    old = new_key(label="svc")
    await key_store.insert(old)
    new = new_key(label="svc", rotated_from=old.id)
    old_after, new_after = await key_store.rotate(old.id, new, NOW + 60_000, NOW)
    assert old_after.expires_at_ms == NOW + 60_000
    assert new_after.rotated_from == old.id and new_after.expires_at_ms is None
    assert {k.id for k in (await key_store.changes(1)).keys} == {old.id, new.id}
    # The old key's expiry never moves later by a rotation.
    third = new_key()
    await key_store.rotate(old.id, third, NOW + 120_000, NOW)
    assert (await key_store.get(old.id)).expires_at_ms == NOW + 60_000  # type: ignore[union-attr]


async def test_a_rotation_of_an_unusable_key_changes_nothing(key_store: KeyStore) -> None:
    revoked, expired = new_key(), new_key(expires_at_ms=NOW - 1)
    await key_store.insert(revoked)
    await key_store.insert(expired)
    await key_store.update(revoked.id, revoked_at_ms=NOW)
    version = await key_store.version()
    for old in (revoked, expired):
        with pytest.raises(KeyNotUsable):
            await key_store.rotate(old.id, new_key(), NOW + 1000, NOW)
    with pytest.raises(KeyNotFound):
        await key_store.rotate("000000000000", new_key(), NOW + 1000, NOW)
    taken = new_key()
    await key_store.insert(taken)
    live = new_key()
    await key_store.insert(live)
    with pytest.raises(KeyConflict):
        await key_store.rotate(live.id, taken, NOW + 1000, NOW)
    assert await key_store.version() == version + 2
    assert (await key_store.get(live.id)).expires_at_ms is None  # type: ignore[union-attr]
