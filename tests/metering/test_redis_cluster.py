"""The Redis store on a Redis Cluster: each tenant's keys on its slot's node, and budgets kept
right while that slot migrates to another node (ASK) and after it has moved (MOVED)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from adapters.state.redis import RedisStore
from adapters.state.redis_cluster import RedisClusterWire
from gateway.metering.records import BudgetCharge, ReserveRequest, Settlement
from gateway.sessions.records import SessionUpdate
from tests.metering.redis_cluster import Cluster

FAR = 4_102_444_800


def reserve(tenant: str, amount: int, limit: int = 1_000) -> ReserveRequest:
    budget = BudgetCharge("usd:day:2026-11-22", amount, limit, True, FAR)
    return ReserveRequest(tenant, uuid.uuid4().hex, (budget,), (), 60.0)


def settle(request: ReserveRequest, amount: int) -> Settlement:
    spent = tuple((b.counter, amount, b.expires_at) for b in request.budgets)
    return Settlement(request.tenant, request.reservation_id, spent, (), None, 900)


async def spend(store: RedisStore, tenant: str, amount: int) -> None:
    request = reserve(tenant, amount)
    assert (await store.reserve(request)).admitted
    assert await store.settle(settle(request, amount))


async def test_each_tenants_keys_live_on_the_node_of_its_slot(cluster: Cluster) -> None:
    prefix = f"tgc-{uuid.uuid4().hex[:8]}"
    store = RedisStore(cluster.url, prefix, cluster=True)
    tenants = [f"tenant-{n}" for n in range(12)]
    try:
        for tenant in tenants:
            await spend(store, tenant, 7)
        for tenant in tenants:
            assert await store.counters(tenant, ("usd:day:2026-11-22",)) == (7,)
    finally:
        await store.aclose()
    owners = {cluster.owner(tenant) for tenant in tenants}
    assert len(owners) > 1  # twelve tenants spread over the nodes
    for tenant in tenants:
        owner = cluster.owner(tenant)
        for port in cluster.ports:
            found = cluster.keys(port, f"{prefix}:{{{tenant}}}:*")
            assert bool(found) == (port == owner), (tenant, port)


async def test_budgets_stay_right_while_a_slot_migrates_and_after_it_moved(cluster: Cluster) -> None:
    prefix = f"tgc-{uuid.uuid4().hex[:8]}"
    tenant = f"mover-{uuid.uuid4().hex[:6]}"
    store = RedisStore(cluster.url, prefix, timeout_s=3.0, cluster=True)
    try:
        await spend(store, tenant, 100)
        source = cluster.owner(tenant)
        target = next(port for port in cluster.ports if port != source)

        # Migrating, every key already moved: the source answers ASK, the target serves.
        cluster.start_migration(tenant, source, target)
        claim = await store.claim_idempotency(tenant, "new-key", "fingerprint", 30.0)
        assert claim.state == "claimed"
        assert (await store.claim_idempotency(tenant, "new-key", "fingerprint", 30.0)).state == "in_flight"

        # A script whose keys are split between the nodes (TRYAGAIN) waits for the migration
        # to end, then follows the slot to its new node (MOVED).
        during = asyncio.create_task(spend(store, tenant, 200))
        await asyncio.sleep(0.2)
        assert not during.done()
        cluster.finish_migration(tenant, target)
        await asyncio.wait_for(during, 5)

        await spend(store, tenant, 300)
        moved = cluster.moved_errors(source)
        for _ in range(5):  # the store's map now names the new node: no more MOVED from the old
            assert await store.counters(tenant, ("usd:day:2026-11-22",)) == (600,)
        assert cluster.moved_errors(source) == moved
        refused = reserve(tenant, 401)  # 600 spent of 1,000: a hard budget still holds
        assert not (await store.reserve(refused)).admitted
        assert cluster.owner(tenant) == target
        assert cluster.keys(source, f"{prefix}:*") == []
    finally:
        await store.aclose()


def test_a_cluster_is_reached_over_tcp_on_database_0() -> None:
    with pytest.raises(ValueError, match="unix socket"):
        RedisClusterWire("unix:///tmp/redis.sock", 1.0)
    with pytest.raises(ValueError, match="database 0"):
        RedisClusterWire("redis://127.0.0.1:7000/3", 1.0)


async def test_a_session_record_is_read_while_its_slot_migrates_and_after_it_moved(cluster: Cluster) -> None:
    """Admission reads a record with plain commands (a GET; for a session with no packed
    record, one transaction); a slot migrating (ASK) or moved (MOVED) is followed."""
    prefix = f"tgc-{uuid.uuid4().hex[:8]}"
    tenant = f"mover-{uuid.uuid4().hex[:6]}"
    store = RedisStore(cluster.url, prefix, timeout_s=3.0, cluster=True)
    stale = RedisStore(cluster.url, prefix, timeout_s=3.0, cluster=True)  # its map made before the move
    turn = SessionUpdate(tenant, "s1", 1, 100, 40, 10, 500, "chat", "local", 0, "", ("d1", "d2"), 1, 600)
    try:
        await store.update_session(turn)
        assert (await store.session(tenant, "s1", decisions=False)) is not None
        assert (await stale.session(tenant, "s1", decisions=False)) is not None
        source = cluster.owner(tenant)
        target = next(port for port in cluster.ports if port != source)
        cluster.start_migration(tenant, source, target)
        # The source answers ASK, which the GET follows.
        during = asyncio.create_task(store.session(tenant, "s1", decisions=False))
        # No packed record: the transaction (answered ASK), then the script
        nobody = asyncio.create_task(store.session(tenant, "nobody", decisions=False))
        await asyncio.sleep(0.2)
        cluster.finish_migration(tenant, target)
        after = await store.session(tenant, "s1", decisions=False)
        moved = cluster.moved_errors(source)
        told = await stale.session(tenant, "s1", decisions=False)  # MOVED, then the script
        assert cluster.moved_errors(source) > moved
        whole = await store.session(tenant, "s1")
        assert whole is not None
        assert whole.decision_ids == ("d2",)
        assert whole.decisions_dropped == 1
        for light in (await asyncio.wait_for(during, 5), after, told):
            assert light is not None and light.decisions_dropped <= whole.decisions_dropped
            assert light == whole._replace(decision_ids=(), decisions_dropped=light.decisions_dropped)
        assert await asyncio.wait_for(nobody, 5) is None
        assert cluster.owner(tenant) == target
    finally:
        await store.aclose()
        await stale.aclose()
