"""How large a slice a worker takes, on a real SQLite store: none at a low rate, at most a
sixteenth of what a hard budget has left, smaller as that falls, and none (every request
reserved exactly) once it would cover fewer than eight requests."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from adapters.state.sqlite import SQLiteStore
from gateway.metering.lease import LeaseDraw
from gateway.metering.leases import MIN_REQUESTS, SHARE, Leases
from gateway.metering.plan import Budget, MeterPlan, Periods, RateLimit
from gateway.metering.records import BudgetCharge, RateCharge, ReserveRequest, Settlement

pytestmark = pytest.mark.usefixtures("one_budget_day")

LIMIT = 10_000_000
AMOUNT = 1_000
PLAN = MeterPlan(budgets=(Budget("t", "day", "usd", LIMIT, True),))


@pytest.fixture
async def store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(tmp_path / "state.db")


def today() -> Periods:
    return Periods.of(datetime.now(UTC))


def counters() -> tuple[tuple[str, int], ...]:
    at = today()
    return ((PLAN.budgets[0].counter(at), PLAN.budgets[0].expires_at(at)),)


def request() -> ReserveRequest:
    [(counter, expires_at)] = counters()
    return ReserveRequest(
        "acme", uuid.uuid4().hex, (BudgetCharge(counter, AMOUNT, LIMIT, True, expires_at),), (), 60
    )


async def draw(leases: Leases) -> LeaseDraw | None:
    deadline = asyncio.get_running_loop().time() + 3
    got = await leases.draw(PLAN, today(), counters(), request(), deadline)
    return got[0] if got is not None else None


async def learn(leases: Leases, store: SQLiteStore) -> None:
    """One exact reservation (as the meter makes when no slice is held), released at once."""
    made = request()
    drawn = await draw(leases)  # the meter asks the lease first: this notes the request's rate
    if drawn is not None:
        leases.settled(drawn, None, tokens=0)
    outcome = await store.reserve(made)
    leases.observe(PLAN, today(), made, outcome)
    await store.settle(Settlement("acme", made.reservation_id, (), (), None, 600, release=True))


async def spend(store: SQLiteStore, amount: int) -> None:
    [(counter, expires_at)] = counters()
    await store.settle(Settlement("acme", uuid.uuid4().hex, ((counter, amount, expires_at),), (), None, 600))


async def held(store: SQLiteStore) -> int:
    [used] = await store.counters("acme", (counters()[0][0],))
    return used


async def test_a_plan_at_a_low_rate_is_reserved_exactly(store: SQLiteStore) -> None:
    leases = Leases(store, lease_grace_s=1, keep_s=600)
    try:
        for _ in range(3):
            await learn(leases, store)
            await asyncio.sleep(0.3)  # about three requests a second
        assert await draw(leases) is None
        assert len(leases) == 0
        assert await store.open_reservations("acme") == 0
    finally:
        await leases.aclose()
        await store.aclose()


async def test_slices_shrink_with_what_is_left_then_give_way_to_exact_reservations(
    store: SQLiteStore,
) -> None:
    leases = Leases(store, lease_grace_s=1, keep_s=600)
    try:
        await learn(leases, store)
        first = await draw(leases)
        assert first is not None  # a burst: a slice is taken
        slice_now = await held(store)
        assert AMOUNT * MIN_REQUESTS <= slice_now <= LIMIT // SHARE
        leases.settled(first, None, tokens=0)
        # Most of the budget goes elsewhere: the next slice is at most 1/16 of what is left.
        await spend(store, LIMIT - 400_000)
        await learn(leases, store)
        drawn = [d for d in [await draw(leases) for _ in range(40)] if d is not None]
        assert drawn
        # The slice: the bounds of the requests drawn on it, and room for at most 1/16 of what
        # was left (the store's answer to the last top-up).
        slice_now = await held(store) - (LIMIT - 400_000)
        assert slice_now - len(drawn) * AMOUNT <= 400_000 // SHARE
        for d in drawn:
            leases.settled(d, None, tokens=0)
        # Fewer than 16 x 8 requests' worth left: no slice; each request is reserved exactly.
        await spend(store, 400_000 - SHARE * MIN_REQUESTS * AMOUNT + AMOUNT)
        await learn(leases, store)
        for _ in range(100):
            if len(leases) == 0:
                break
            await asyncio.sleep(0.05)
        assert [await draw(leases) for _ in range(20)] == [None] * 20
        assert await store.open_reservations("acme") == 0
    finally:
        await leases.aclose()
        await store.aclose()


async def test_rate_limit_headers_from_a_slice_count_down_within_the_limit(store: SQLiteStore) -> None:
    per_minute = 100_000
    plan = MeterPlan(rates=(RateLimit("t", "requests", per_minute),))
    leases = Leases(store, lease_grace_s=1, keep_s=600)
    at = today()

    def made() -> ReserveRequest:
        return ReserveRequest("acme", uuid.uuid4().hex, (), (RateCharge("t:rpm", 1, per_minute),), 60)

    try:
        first = made()
        assert await leases.draw(plan, at, (), first, asyncio.get_running_loop().time() + 3) is None
        leases.observe(plan, at, first, await store.reserve(first))
        shown: list[int] = []
        for _ in range(60):
            got = await leases.draw(plan, at, (), made(), asyncio.get_running_loop().time() + 3)
            if got is not None:
                shown.append(got[1].rates[0].remaining)
                leases.settled(got[0], None, tokens=0)
        assert len(shown) > 30  # most were admitted from the slice
        # What a client is told: never more than the limit, and one less per request admitted
        # from the slice (between the worker's calls to the store, which may add refill).
        assert all(0 < remaining <= per_minute for remaining in shown)
        assert max(shown) <= per_minute - 1  # the exact first request is counted
        steps = [a - b for a, b in itertools.pairwise(shown)]
        assert steps.count(1) >= len(steps) // 2
    finally:
        await leases.aclose()
        await store.aclose()
