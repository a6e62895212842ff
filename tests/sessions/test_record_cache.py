"""A worker's cache of session records (`SessionStore`), on every real store: a stale entry
is read once however many requests of its session want it at the same time."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from gateway.metering.records import Settlement
from gateway.ports import StateStore
from gateway.sessions.records import SessionRecord, SessionUpdate
from gateway.sessions.store_access import SessionStore


class CountedReads:
    """The store, with its record reads counted (and each held a little, as over a network)."""

    def __init__(self, store: StateStore) -> None:
        self._store = store
        self.reads = 0

    async def session(self, tenant: str, session: str, decisions: bool = True) -> SessionRecord | None:
        self.reads += 1
        await asyncio.sleep(0.05)
        return await self._store.session(tenant, session, decisions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def turn(session: str) -> Settlement:
    update = SessionUpdate(
        "acme", session, 1, 100, 40, 10, 500, "chat", "local", 0, "triage", (uuid.uuid4().hex,), 8, 600
    )
    return Settlement("acme", uuid.uuid4().hex, (), (), None, keep_s=600, session=update)


async def test_requests_finding_a_stale_entry_together_share_one_read(store: StateStore) -> None:
    assert await store.settle(turn("s1"))
    assert await store.settle(turn("s2"))
    counted = CountedReads(store)
    cache = SessionStore(lambda: counted, ttl_s=60)
    answers = await asyncio.gather(
        *(cache.admission("acme", "s1") for _ in range(10)), cache.admission("acme", "s2")
    )
    assert counted.reads == 2  # one a session
    assert {record.session for record, _ in answers if record is not None} == {"s1", "s2"}
    assert all(record is not None and record.turns == 1 for record, _ in answers)
    assert answers[0][1]["turns"] == "1"  # the policy's bands, from the same read
    await cache.admission("acme", "s1")
    assert counted.reads == 2  # fresh: from the cache
    assert cache.cached("acme", "s1") is not None and cache.cached("acme", "s3") is None


async def test_requests_waiting_on_a_read_whose_request_went_away_read_again_once(store: StateStore) -> None:
    assert await store.settle(turn("s1"))
    counted = CountedReads(store)
    cache = SessionStore(lambda: counted, ttl_s=60)
    first = asyncio.ensure_future(cache.admission("acme", "s1"))
    await asyncio.sleep(0.01)
    waiting = [asyncio.ensure_future(cache.admission("acme", "s1")) for _ in range(5)]
    await asyncio.sleep(0.01)
    first.cancel()  # its client went away, and its read with it
    answers = await asyncio.gather(*waiting)
    assert all(record is not None and record.turns == 1 for record, _ in answers)
    assert counted.reads == 2 and first.cancelled()  # one of the five read again, for all


async def test_a_stale_entry_is_read_again(store: StateStore) -> None:
    assert await store.settle(turn("s1"))
    counted = CountedReads(store)
    cache = SessionStore(lambda: counted, ttl_s=0.0)  # never fresh
    for _ in range(3):
        await cache.admission("acme", "s1")
    assert counted.reads == 3
    assert await store.settle(turn("s1"))
    record, _ = await cache.admission("acme", "s1")
    assert record is not None and record.turns == 2
