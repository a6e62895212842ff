"""The budget band the policy sees, read from a real store and cached."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from adapters.state.sqlite import SQLiteStore
from gateway.exchange import Principal, Tenant
from gateway.keys import hash_key, key_id
from gateway.metering.bands import BudgetBands, band_of
from gateway.metering.plan import Budget, MeterPlans
from gateway.metering.records import Settlement
from tests.servers import gateway_config

SOFT, HARD = Budget("t", "day", "usd", 100, False), Budget("t", "day", "tok", 50, True)
_SOFT_BUDGET = gateway_config(  # acme, its key tg-k, a soft budget of 100 micro-dollars a day
    upstreams={"u": {"kind": "openai_compat", "base_url": "http://127.0.0.1:1/v1"}},
    models={"m": [{"upstream": "u", "model": "x"}]},
    tenants={"acme": {"budgets": [{"window": "day", "usd": 0.0001, "kind": "soft"}]}},
    keys=[{"tenant": "acme", "hash": hash_key("tg-k")}],
)
_ACME = Principal(Tenant("acme"), key_id(hash_key("tg-k")))


async def _spend_the_soft_budget(store: SQLiteStore) -> None:
    counter = f"t:day:{datetime.now(UTC).date().isoformat()}:usd"
    assert await store.settle(
        Settlement("acme", uuid.uuid4().hex, ((counter, 100, 4_102_444_800),), (), None, 600)
    )


def test_band_of_names_the_worst_budget_used_up() -> None:
    assert band_of((SOFT, HARD), (99, 49)) == "ok"
    assert band_of((SOFT, HARD), (100, 49)) == "soft_exceeded"
    assert band_of((SOFT, HARD), (100, 50)) == "exceeded"
    assert band_of((SOFT, HARD), (0, 60)) == "exceeded"


@pytest.mark.usefixtures("one_budget_day")
async def test_bands_follow_the_store_and_are_reused_for_their_ttl(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    now = [0.0]
    bands = BudgetBands(store, MeterPlans(_SOFT_BUDGET), ttl_s=1.0, monotonic=lambda: now[0])
    try:
        assert await bands.band(_ACME) == "ok"
        await _spend_the_soft_budget(store)
        assert await bands.band(_ACME) == "ok"  # still the cached band
        now[0] = 1.5
        assert await bands.band(_ACME) == "soft_exceeded"
        assert await bands.band(Principal(Tenant("other"), "x")) == "ok"  # no budgets
    finally:
        await store.aclose()


class _CountedReads(SQLiteStore):
    """The real store, its counter reads counted and held until `release` is set."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reads = 0
        self.release = asyncio.Event()

    async def counters(self, tenant: str, counters: tuple[str, ...]) -> tuple[int, ...]:
        self.reads += 1
        await self.release.wait()
        return await super().counters(tenant, counters)


@pytest.mark.usefixtures("one_budget_day")
async def test_a_stale_band_is_read_once_while_the_others_take_it_as_it_was(tmp_path: Path) -> None:
    store = _CountedReads(tmp_path / "state.db")
    now = [0.0]
    bands = BudgetBands(store, MeterPlans(_SOFT_BUDGET), ttl_s=1.0, monotonic=lambda: now[0])
    try:
        store.release.set()
        assert await bands.band(_ACME) == "ok"
        await _spend_the_soft_budget(store)
        store.release.clear()
        now[0] = 1.5  # stale: the first request reads it, the 49 others do not wait for that read
        reading = asyncio.create_task(bands.band(_ACME))
        await asyncio.sleep(0)
        async with asyncio.timeout(10):  # a request waiting for that read would wait here for ever
            assert [await bands.band(_ACME) for _ in range(49)] == ["ok"] * 49
        store.release.set()
        assert await reading == "soft_exceeded"
        assert store.reads == 2  # the first band, and the one refresh
        assert await bands.band(_ACME) == "soft_exceeded"  # fresh again: from the cache
        assert store.reads == 2
    finally:
        await store.aclose()
