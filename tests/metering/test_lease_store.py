"""The lease call of the StateStore contract (`StateStore.lease`), against SQLite, Redis and
Redis Cluster: holds within hard limits, batches applied once, stale and late calls
changing nothing, leases released when their time passes."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.metering.lease_records import LeaseBudget, LeaseRate, LeaseSync, SettleBatch
from gateway.metering.records import LedgerEntry, RateCharge, ReserveRequest, Settlement
from gateway.ports import StateStore
from gateway.sessions.records import Checkpoint, SessionRecord, SessionUpdate
from tests.metering.test_store_contract import EXPIRES, budget, reserve_request

COUNTER = "t:day:2026-11-22:usd"
DAY = "2026-11-22"


def hold(want: int, floor: int = 0, limit: int = 1000, hard: bool = True) -> LeaseBudget:
    return LeaseBudget(COUNTER, want, floor, limit, hard, EXPIRES)


def sync(
    lease_id: str,
    seq: int,
    *budgets: LeaseBudget,
    rates: tuple[LeaseRate, ...] = (),
    batch: SettleBatch | None = None,
    close: bool = False,
    lease_s: float = 60,
) -> LeaseSync:
    return LeaseSync("acme", lease_id, seq, lease_s, budgets, rates, batch, close)


def batch_of(*amounts: int) -> SettleBatch:
    settlements = tuple(
        Settlement(
            "acme",
            uuid.uuid4().hex,
            ((COUNTER, amount, EXPIRES),),
            (),
            LedgerEntry(DAY, "k1", "m1", 10, 0, amount, amount),
            keep_s=600,
        )
        for amount in amounts
    )
    return SettleBatch(uuid.uuid4().hex, settlements, keep_s=600)


async def test_a_lease_holds_what_a_hard_limit_leaves_and_is_counted_as_used(store: StateStore) -> None:
    assert (await store.reserve(reserve_request(budget(300, 1000)))).admitted
    grant = await store.lease(sync("lease-a", 1, hold(900)))
    assert grant.state == "held"
    assert grant.holds == (700,)  # lowered to what the limit leaves
    assert grant.used == (1000,)
    assert await store.open_reservations("acme") == 2
    # Nothing else fits while the lease holds the rest.
    assert not (await store.reserve(reserve_request(budget(1, 1000)))).admitted
    other = await store.lease(sync("lease-b", 1, hold(100)))
    assert other.holds == (0,)
    # A soft budget is held as asked.
    soft = await store.lease(
        sync("lease-c", 1, LeaseBudget("t:day:2026-11-22:tok", 5000, 0, 10, False, EXPIRES))
    )
    assert soft.holds == (5000,)


async def test_a_batch_is_applied_once_however_often_it_is_sent(store: StateStore) -> None:
    first = await store.lease(sync("lease-a", 1, hold(500)))
    assert first.holds == (500,)
    batch = batch_of(100, 50)
    # The lease's hold shrinks by what was spent as the spend is added: used stays the same.
    applied = await store.lease(sync("lease-a", 2, hold(350, floor=350), batch=batch))
    assert applied.batch_applied
    assert applied.used == (500,)
    again = await store.lease(sync("lease-a", 3, hold(350, floor=350), batch=batch))
    assert not again.batch_applied
    assert again.used == (500,)
    closed = await store.lease(sync("lease-a", 4, hold(0), close=True))
    assert closed.state == "closed"
    assert await store.counters("acme", (COUNTER,)) == (150,)
    [row] = await store.spend(("acme",), DAY, DAY)
    assert (row.requests, row.cost_micros, row.completion_tokens) == (2, 150, 150)
    assert await store.open_reservations("acme") == 0


async def test_a_stale_or_late_call_changes_no_hold(store: StateStore) -> None:
    await store.lease(sync("lease-a", 2, hold(400)))
    stale = await store.lease(sync("lease-a", 1, hold(900)))
    assert stale.state == "stale"
    assert stale.holds == (400,)
    assert await store.counters("acme", (COUNTER,)) == (400,)
    # Given back, then a late call of the same lease arrives: it takes nothing.
    await store.lease(sync("lease-a", 3, hold(0), close=True))
    late = await store.lease(sync("lease-a", 4, hold(900)))
    assert late.state == "closed"
    assert await store.counters("acme", (COUNTER,)) == (0,)
    # A close that arrives before the lease was taken: the taking, arriving late, is refused.
    assert (await store.lease(sync("lease-b", 2, hold(0), close=True))).state == "closed"
    assert (await store.lease(sync("lease-b", 1, hold(300)))).state == "closed"
    assert await store.counters("acme", (COUNTER,)) == (0,)


async def test_a_lease_not_renewed_is_released_when_its_time_passes(store: StateStore) -> None:
    await store.lease(sync("lease-a", 1, hold(600), lease_s=0.2))
    assert await store.counters("acme", (COUNTER,)) == (600,)
    await asyncio.sleep(0.3)
    assert await store.counters("acme", (COUNTER,)) == (0,)
    assert await store.open_reservations("acme") == 0
    # Its worker, come back late, finds it gone; the batch it carries is still applied.
    late = await store.lease(sync("lease-a", 2, hold(600, floor=600), batch=batch_of(70)))
    assert late.state == "closed"
    assert late.batch_applied
    assert await store.counters("acme", (COUNTER,)) == (70,)


async def test_rate_units_are_taken_ahead_and_given_back(store: StateStore) -> None:
    rate = "t:rpm"
    grant = await store.lease(sync("lease-a", 1, rates=(LeaseRate(rate, 10, 4, 0),)))
    assert grant.taken == (4,)
    assert grant.rates[0].remaining == 6
    # More than the window has left: what fits.
    grant = await store.lease(sync("lease-a", 2, rates=(LeaseRate(rate, 10, 20, 4),)))
    assert grant.taken == (10,)
    assert grant.rates[0].remaining == 0
    refused = await store.reserve(
        ReserveRequest("acme", uuid.uuid4().hex, (), (RateCharge(rate, 1, 10),), 60)
    )
    assert not refused.admitted
    # Three used: the other seven are given back with the lease.
    await store.lease(sync("lease-a", 3, rates=(LeaseRate(rate, 10, 3, 3),), close=True))
    admitted = await store.reserve(
        ReserveRequest("acme", uuid.uuid4().hex, (), (RateCharge(rate, 1, 10),), 60)
    )
    assert admitted.admitted
    assert admitted.rates[0].remaining == 6


async def test_a_batch_keeps_each_ledger_row_apart_by_workflow(store: StateStore) -> None:
    settlements = tuple(
        Settlement(
            "acme",
            uuid.uuid4().hex,
            ((COUNTER, 10, EXPIRES),),
            (),
            LedgerEntry(DAY, "k1", "m1", 10, 0, 5, 10, workflow=workflow),
            keep_s=600,
        )
        for workflow in ("search", "search", "default")
    )
    await store.lease(sync("lease-a", 1, hold(0), batch=SettleBatch(uuid.uuid4().hex, settlements, 600)))
    rows = await store.spend(("acme",), DAY, DAY)
    assert sorted((row.workflow, row.requests, row.cost_micros) for row in rows) == [
        ("default", 1, 10),
        ("search", 2, 20),
    ]


def turn_of(session: str, prompt: int, decision: str) -> Settlement:
    """A settlement carrying one turn of `session` (its cost: the prompt's tokens, in micros)."""
    update = SessionUpdate(
        "acme", session, 1, prompt, 0, 5, prompt, "chat", "local", 0, "", (decision,), 10, 3600
    )
    ledger = LedgerEntry(DAY, "k1", "m1", prompt, 0, 5, prompt)
    return Settlement("acme", uuid.uuid4().hex, ((COUNTER, 50, EXPIRES),), (), ledger, 600, session=update)


async def test_a_batch_updates_its_sessions_once_in_the_batch_order(store: StateStore) -> None:
    one, other = uuid.uuid4().hex, uuid.uuid4().hex
    await store.lease(sync("lease-a", 1, hold(500)))
    batch = SettleBatch(
        uuid.uuid4().hex, (turn_of(one, 10, "d1"), turn_of(other, 7, "d2"), turn_of(one, 25, "d3")), 600
    )
    applied = await store.lease(sync("lease-a", 2, hold(350, floor=350), batch=batch))
    assert applied.batch_applied
    again = await store.lease(sync("lease-a", 3, hold(350, floor=350), batch=batch))
    assert not again.batch_applied
    record = await store.session("acme", one)
    assert record is not None
    assert (record.turns, record.input_tokens, record.output_tokens, record.cost_micros) == (2, 35, 10, 35)
    assert (record.first_input, record.last_input, record.last_growth) == (10, 25, 15)
    assert record.decision_ids == ("d1", "d3")
    assert (record.model, record.upstream) == ("chat", "local")
    second = await store.session("acme", other)
    assert second is not None
    assert (second.turns, second.input_tokens, second.decision_ids) == (1, 7, ("d2",))
    assert {r.session for r in await store.sessions(("acme",), "tokens", 10)} == {one, other}
    assert applied.used == (500,)


def _turns(session: str, reload: bool = False) -> list[SessionUpdate]:
    """Turns of one session for one batch: served and not, a workflow and model changed, a
    due reason, two checkpoints, more decision ids than the record lists (and, on a reload,
    fewer listed from the fourth turn on)."""
    first = Checkpoint(2, 5, "ab" * 32, "earlier", 900, 30)
    second = Checkpoint(4, 9, "cd" * 32, "later", 1200, 40)

    def turn(prompt: int, decisions: tuple[str, ...], **changes: object) -> SessionUpdate:
        fields: dict[str, object] = {
            "tenant": "acme",
            "session": session,
            "turn": 1,
            "input_tokens": prompt,
            "cached_tokens": prompt // 2,
            "output_tokens": 7,
            "cost_micros": 3 * prompt,
            "model": "chat",
            "upstream": "local",
            "replica": 0,
            "workflow": "",
            "decision_ids": decisions,
            "max_decisions": 4,
            "idle_s": 3600,
            "max_checkpoints": 2,
        }
        fields.update(changes)
        return SessionUpdate(**fields)  # type: ignore[arg-type]

    later = {"max_decisions": 3} if reload else {}
    return [
        turn(100, ("a1",), workflow="triage"),
        turn(0, ("a2",), turn=0, cached_tokens=0, output_tokens=0, cost_micros=0, model="", upstream=""),
        turn(130, ("a3", "a4"), checkpoint=first, due="every_turns 2"),
        turn(90, (), upstream="backup", replica=2, workflow="search", **later),
        turn(170, ("a5", "a6"), model="big", checkpoint=second, **later),
        turn(
            0,
            ("a7",),
            turn=0,
            cached_tokens=0,
            output_tokens=0,
            cost_micros=0,
            model="",
            upstream="",
            **later,
        ),
    ]


def _same_record(record: SessionRecord | None) -> tuple[object, ...]:
    assert record is not None
    fields = tuple(record)
    return fields[:1] + fields[4:]  # all but the session key and the times seen


@pytest.mark.parametrize(("before", "reload"), [(0, False), (2, False), (1, True)])
async def test_a_sessions_turns_in_one_batch_leave_the_record_they_leave_one_by_one(
    store: StateStore, before: int, reload: bool
) -> None:
    """However a store applies a batch's turns of one session (folded into one update or not),
    the record is the one those turns give applied one after another."""
    batched, alone = uuid.uuid4().hex, uuid.uuid4().hex
    for n in range(before):  # a record that already has turns, or none
        for session in (batched, alone):
            await store.update_session(_turns(session)[2 * n])
    await store.lease(sync("lease-a", 1, hold(500)))
    turns = _turns(batched, reload)
    other = turn_of(uuid.uuid4().hex, 11, "b1")
    settlements = [Settlement("acme", uuid.uuid4().hex, (), (), None, 600, session=u) for u in turns]
    batch = SettleBatch(uuid.uuid4().hex, (*settlements[:3], other, *settlements[3:]), 600)
    assert (await store.lease(sync("lease-a", 2, hold(500), batch=batch))).batch_applied
    for update in _turns(alone, reload):
        await store.update_session(update)
    one_by_one = await store.session("acme", alone)
    assert _same_record(await store.session("acme", batched)) == _same_record(one_by_one)
    assert one_by_one is not None
    assert one_by_one.turns == before + 4
    assert one_by_one.decision_ids == (("a5", "a6", "a7") if reload else ("a4", "a5", "a6", "a7"))
    assert [c.turn for c in one_by_one.checkpoints] == [2, 4]


async def test_a_batch_with_held_session_updates_applies_those_and_not_its_settlements_own(
    store: StateStore,
) -> None:
    """A worker that holds session updates back sends them as the batch's `sessions` (a hot
    session's turns, from this batch's settlements and earlier ones): those are applied, in
    their order; the settlements' own `session` (carried, held elsewhere) are not."""
    one, other = uuid.uuid4().hex, uuid.uuid4().hex
    await store.lease(sync("lease-a", 1, hold(500)))
    earlier = turn_of(one, 10, "d1").session
    settlements = (turn_of(one, 25, "d3"), turn_of(other, 7, "d2"))
    assert earlier is not None
    held = (earlier, *(s.session for s in settlements[:1] if s.session is not None))
    batch = SettleBatch(uuid.uuid4().hex, settlements, 600, sessions=held)
    assert (await store.lease(sync("lease-a", 2, hold(400, floor=400), batch=batch))).batch_applied
    record = await store.session("acme", one)
    assert record is not None
    assert (record.turns, record.input_tokens, record.first_input, record.last_input) == (2, 35, 10, 25)
    assert record.decision_ids == ("d1", "d3")
    assert await store.session("acme", other) is None  # held in the worker: not this batch's
    rows = await store.spend(("acme",), DAY, DAY)
    assert sum(row.requests for row in rows) == 2  # the settlements themselves all count
