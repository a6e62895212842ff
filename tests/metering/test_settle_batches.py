"""Settle batches and a store that goes away: a batch the store did not answer is sent again
until it is taken, and counted once, whether the first try reached the store late (a
redis-server stopped with SIGSTOP, then resumed: the first try and the retry both arrive)
or not at all (a redis-server killed, then restarted); the session records a batch updates
take each turn once too. The leases of a real `Leases` on a
real Redis; the requests are the meter's and settle's calls, made directly."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from adapters.state.redis import RedisStore
from gateway.metering.lease import LeaseDraw
from gateway.metering.leases import Leases
from gateway.metering.plan import Budget, MeterPlan, Periods
from gateway.metering.records import BudgetCharge, LedgerEntry, ReserveRequest, Settlement
from gateway.sessions.records import SessionUpdate
from tests.metering.processes import RedisProcess
from tests.processes import process_timeout

pytestmark = [process_timeout, pytest.mark.usefixtures("one_budget_day")]

LIMIT = 100_000_000
AMOUNT = 1_000  # each request's upper bound
SPENT = 700  # and what it spends
PLAN = MeterPlan(budgets=(Budget("t", "day", "usd", LIMIT, True),))


@pytest.fixture
async def redis(tmp_path: Path) -> AsyncIterator[RedisProcess]:
    process = RedisProcess(tmp_path)
    try:
        yield process
    finally:
        process.kill()


def periods() -> Periods:
    return Periods.of(datetime.now(UTC))


def request(counter: str, expires_at: int) -> ReserveRequest:
    charge = BudgetCharge(counter, AMOUNT, LIMIT, True, expires_at)
    return ReserveRequest("acme", uuid.uuid4().hex, (charge,), (), 60)


def settlement(draw_request: ReserveRequest, day: str, session: SessionUpdate | None = None) -> Settlement:
    [charge] = draw_request.budgets
    ledger = LedgerEntry(day, "k1", "m1", 10, 0, 5, SPENT)
    spent = ((charge.counter, SPENT, charge.expires_at),)
    return Settlement("acme", draw_request.reservation_id, spent, (), ledger, 600, session=session)


def turn(session: str, n: int) -> SessionUpdate:
    """The n-th turn of a session: 10 * n input tokens, decided by decision `d<n>`."""
    return SessionUpdate(
        "acme", session, 1, 10 * n, 0, 5, SPENT, "chat", "local", 0, "", (f"d{n}",), 100, 3600
    )


async def busy_lease(leases: Leases, store: RedisStore, n: int) -> list[tuple[LeaseDraw, ReserveRequest]]:
    """n requests admitted against a lease: the plan made busy, its limits learnt from one
    exact reservation, as the meter does."""
    at = periods()
    counter, expires_at = PLAN.budgets[0].counter(at), PLAN.budgets[0].expires_at(at)
    counters = ((counter, expires_at),)
    first = request(counter, expires_at)
    assert (
        await leases.draw(PLAN, at, counters, first, deadline=asyncio.get_running_loop().time() + 3) is None
    )
    outcome = await store.reserve(first)
    leases.observe(PLAN, at, first, outcome)
    await store.settle(settlement(first, at.day))
    drawn = []
    while len(drawn) < n:
        made = request(counter, expires_at)
        got = await leases.draw(PLAN, at, counters, made, deadline=asyncio.get_running_loop().time() + 3)
        if got is not None:
            drawn.append((got[0], made))
    return drawn


async def spent_and_requests(store: RedisStore) -> tuple[int, int]:
    at = periods()
    [used] = await store.counters("acme", (PLAN.budgets[0].counter(at),))
    rows = await store.spend(("acme",), at.day, at.day)
    return used, sum(row.requests for row in rows)


async def settle_all(
    leases: Leases, drawn: list[tuple[LeaseDraw, ReserveRequest]], sessions: tuple[str, ...] = ()
) -> None:
    """Settle every drawn request; with `sessions`, the i-th one is turn i // len(sessions) + 1
    of session i % len(sessions)."""
    day = periods().day
    for i, (draw, made) in enumerate(drawn):
        update = turn(sessions[i % len(sessions)], i // len(sessions) + 1) if sessions else None
        leases.settled(draw, settlement(made, day, update), tokens=15)


async def wait_for(predicate_store: RedisStore, expected: tuple[int, int], seconds: float = 30) -> None:
    loop = asyncio.get_running_loop()
    give_up = loop.time() + seconds
    while await spent_and_requests(predicate_store) != expected:
        assert loop.time() < give_up, await spent_and_requests(predicate_store)
        await asyncio.sleep(0.05)


async def test_a_batch_that_reached_a_hung_store_late_is_counted_once(redis: RedisProcess) -> None:
    prefix = f"tgbatch-{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis.url, prefix, timeout_s=0.3)
    observer = RedisStore(redis.url, prefix, timeout_s=10)
    leases = Leases(store, lease_grace_s=1, keep_s=600)
    try:
        drawn = await busy_lease(leases, store, 40)
        os.kill(redis.popen.pid, signal.SIGSTOP)
        try:
            await settle_all(leases, drawn)  # their batch goes out, and times out
            for _ in range(200):
                await asyncio.sleep(0.05)
                if leases.waiting_batches():
                    break
            assert leases.waiting_batches() == 1
        finally:
            os.kill(redis.popen.pid, signal.SIGCONT)
        # The late first try and the retry both reach Redis: one counts.
        expected = (SPENT * 41, 41)  # the exact first request, and the 40 of the batch
        await wait_for(observer, expected)
        await leases.aclose()
        assert await spent_and_requests(observer) == expected
        assert await observer.open_reservations("acme") == 0
    finally:
        await leases.aclose()
        await store.aclose()
        await observer.aclose()


async def test_a_batch_lost_with_a_dead_store_is_sent_again_once_it_is_back(redis: RedisProcess) -> None:
    prefix = f"tgbatch-{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis.url, prefix, timeout_s=0.3)
    leases = Leases(store, lease_grace_s=1, keep_s=600)
    try:
        drawn = await busy_lease(leases, store, 30)
        redis.kill()
        await settle_all(leases, drawn)
        for _ in range(200):
            await asyncio.sleep(0.05)
            if leases.waiting_batches():
                break
        assert leases.waiting_batches() == 1
        # While the store is away the lease admits nothing more: requests go the exact way,
        # which fails closed.
        at = periods()
        counters = ((PLAN.budgets[0].counter(at), PLAN.budgets[0].expires_at(at)),)
        more = request(*counters[0])
        assert await leases.draw(PLAN, at, counters, more, asyncio.get_running_loop().time() + 3) is None
        redis = redis.restart()  # appendfsync always: what it took before is still there
        observer = RedisStore(redis.url, prefix, timeout_s=10)
        try:
            await wait_for(observer, (SPENT * 31, 31))
            await leases.aclose()
            assert await spent_and_requests(observer) == (SPENT * 31, 31)
            assert await observer.open_reservations("acme") == 0
        finally:
            await observer.aclose()
    finally:
        await leases.aclose()
        await store.aclose()
        redis.kill()


@pytest.mark.parametrize("outage", ["stopped", "killed"])
async def test_the_session_updates_of_a_batch_lost_to_an_outage_are_applied_once(
    redis: RedisProcess, outage: str
) -> None:
    """A batch carrying the turns of two sessions, sent to a store that is stopped (the first
    try arrives late, with its retry) or killed and restarted (the retry alone arrives):
    each session takes each of its turns once, in order."""
    prefix = f"tgbatch-{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis.url, prefix, timeout_s=0.3)
    leases = Leases(store, lease_grace_s=1, keep_s=600)
    sessions = (uuid.uuid4().hex, uuid.uuid4().hex)
    observer: RedisStore | None = None
    try:
        drawn = await busy_lease(leases, store, 20)
        if outage == "stopped":
            os.kill(redis.popen.pid, signal.SIGSTOP)
        else:
            redis.kill()
        try:
            await settle_all(leases, drawn, sessions)
            for _ in range(200):
                await asyncio.sleep(0.05)
                if leases.waiting_batches():
                    break
            assert leases.waiting_batches() == 1
        finally:
            if outage == "stopped":
                os.kill(redis.popen.pid, signal.SIGCONT)
            else:
                redis = redis.restart()
        observer = RedisStore(redis.url, prefix, timeout_s=10)
        await wait_for(observer, (SPENT * 21, 21))
        await leases.aclose()
        assert await spent_and_requests(observer) == (SPENT * 21, 21)
        for session in sessions:
            record = await observer.session("acme", session)
            assert record is not None
            assert record.turns == 10
            assert record.input_tokens == 10 * sum(range(1, 11))
            assert record.cost_micros == SPENT * 10
            assert (record.last_input, record.last_growth) == (100, 10)
            assert record.decision_ids == tuple(f"d{n}" for n in range(1, 11))
    finally:
        await leases.aclose()
        await store.aclose()
        if observer is not None:
            await observer.aclose()
        redis.kill()


async def test_held_session_updates_reach_the_records_once_whole_and_in_order(redis: RedisProcess) -> None:
    """Leases holding session updates (`sessions.update_hold_s`): the turns' spend is applied
    by the batches as before while the records wait; a hold that passes sends them (one
    session's turns folded into one update), and giving the leases back sends what is left:
    each session then holds each of its turns once, in order."""
    prefix = f"tgbatch-{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis.url, prefix, timeout_s=10)
    leases = Leases(store, lease_grace_s=1, keep_s=600, session_hold_s=0.5)
    slow = uuid.uuid4().hex
    sessions = (uuid.uuid4().hex, uuid.uuid4().hex)
    try:
        drawn = await busy_lease(leases, store, 21)
        await settle_all(leases, drawn[:20], sessions)
        await wait_for(store, (SPENT * 21, 21))  # the spend went: the first request and 20 turns
        loop = asyncio.get_running_loop()
        give_up = loop.time() + 30
        while (record := await store.session("acme", sessions[1])) is None or record.turns < 10:
            assert loop.time() < give_up, record
            await asyncio.sleep(0.05)
        await leases.aclose()  # (already sent; nothing changes)
        for session in sessions:
            record = await store.session("acme", session)
            assert record is not None
            assert record.turns == 10
            assert record.input_tokens == 10 * sum(range(1, 11))
            assert record.decision_ids == tuple(f"d{n}" for n in range(1, 11))
            assert (record.last_input, record.last_growth) == (100, 10)
        # A lease given back (idle, or at shutdown) sends the updates it still holds.
        other = Leases(store, lease_grace_s=1, keep_s=600, session_hold_s=3600)
        try:
            [(draw, made)] = await busy_lease(other, store, 1)
            other.settled(draw, settlement(made, periods().day, turn(slow, 1)), tokens=15)
        finally:
            await other.aclose()
        record = await store.session("acme", slow)
        assert record is not None
        assert (record.turns, record.decision_ids) == (1, ("d1",))
    finally:
        await leases.aclose()
        await store.aclose()
