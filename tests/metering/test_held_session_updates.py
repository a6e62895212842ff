"""A lease holding its requests' session updates back (`sessions.update_hold_s`): a session's
updates wait from its oldest one until they are `hold_s` old, then go together, in order, in
the batch of the next call (`SettleBatch.sessions`), while the settlements themselves go at
every call; a checkpoint goes at once with the updates before it; the closing call takes
everything; a lease holding updates is not idle. The lease alone, its calls answered by hand."""

from __future__ import annotations

import uuid

from gateway.metering.lease import Lease
from gateway.metering.lease_records import LeaseGrant, SettleBatch
from gateway.metering.plan import Budget, MeterPlan
from gateway.metering.records import Settlement
from gateway.sessions.records import Checkpoint, SessionUpdate

PLAN = MeterPlan(budgets=(Budget("t", "day", "usd", 10**12, True),))
COUNTERS = (("t:day:2026-12-03:usd", 2**31),)
CHECKPOINT = Checkpoint(2, 5, "ab" * 32, "a summary", 900, 30)


def turn(session: str, n: int, checkpoint: Checkpoint | None = None) -> SessionUpdate:
    return SessionUpdate(
        "acme",
        session,
        1,
        10 * n,
        0,
        5,
        70,
        "chat",
        "local",
        0,
        "",
        (f"d{n}",),
        64,
        3600,
        checkpoint=checkpoint,
    )


def finish(lease: Lease, update: SessionUpdate | None, now: float) -> Settlement:
    """One request admitted against the lease and over at `now`, its settlement carrying `update`."""
    draw = lease.draw((100,), (), now)
    spent = ((COUNTERS[0][0], 70, COUNTERS[0][1]),)
    settled = Settlement("acme", uuid.uuid4().hex, spent, (), None, 600, session=update)
    lease.finished(draw, settled, 15, now)
    return settled


def call(lease: Lease, now: float) -> SettleBatch | None:
    """The lease's next call at `now`, answered as applied; its batch."""
    sync = lease.next_sync([1000], [], 60, 600, now=now)
    lease.answered(sync, LeaseGrant("held", True, (1000,), (1000,), (), ()), now)
    return sync.batch


def test_a_hot_sessions_turns_wait_then_go_together_in_order() -> None:
    lease = Lease("acme", PLAN, COUNTERS, 0.0, hold_s=1.0)
    one, other = uuid.uuid4().hex, uuid.uuid4().hex
    first = [
        finish(lease, turn(one, 1), 0.0),
        finish(lease, turn(other, 1), 0.1),
        finish(lease, turn(one, 2), 0.2),
    ]
    batch = call(lease, 0.3)
    assert batch is not None
    assert batch.settlements == tuple(first)  # the spend goes at every call
    assert batch.session_updates() == ()  # the sessions' updates wait
    finish(lease, turn(one, 3), 0.5)
    later = call(lease, 1.05)  # `one` waited its hold (since 0.0), `other` (since 0.1) not yet
    assert later is not None
    assert later.session_updates() == (turn(one, 1), turn(one, 2), turn(one, 3))
    last = call(lease, 1.2)
    assert last is not None
    assert last.settlements == ()
    assert last.session_updates() == (turn(other, 1),)
    assert lease.idle
    assert call(lease, 5.0) is None  # nothing left to send


def test_a_checkpoint_goes_in_the_next_batch_after_the_sessions_earlier_turns() -> None:
    lease = Lease("acme", PLAN, COUNTERS, 0.0, hold_s=10.0)
    one, other = uuid.uuid4().hex, uuid.uuid4().hex
    finish(lease, turn(one, 1), 0.0)
    finish(lease, turn(other, 1), 0.0)
    finish(lease, turn(one, 2, CHECKPOINT), 0.1)  # another worker may look for it now
    assert lease.holds_due(0.2)
    batch = call(lease, 0.2)
    assert batch is not None
    assert batch.session_updates() == (turn(one, 1), turn(one, 2, CHECKPOINT))
    finish(lease, turn(one, 3), 0.3)  # held again, as any turn without a checkpoint
    assert not lease.holds_due(0.4)
    assert {session for session in lease.held} == {one, other}


def test_a_lease_holding_updates_is_not_idle_and_its_closing_call_takes_them_all() -> None:
    lease = Lease("acme", PLAN, COUNTERS, 0.0, hold_s=30.0)
    sessions = [uuid.uuid4().hex for _ in range(3)]
    for n, session in enumerate(sessions):
        finish(lease, turn(session, n + 1), 0.1 * n)
    batch = call(lease, 0.5)
    assert batch is not None and batch.session_updates() == ()
    assert not lease.idle  # forgetting it would lose the sessions' turns
    lease.closing = True
    sync = lease.next_sync([0], [], 60, 600, now=1.0)
    assert sync.close
    assert sync.batch is not None
    assert sync.batch.settlements == ()
    assert sync.batch.session_updates() == tuple(turn(s, n + 1) for n, s in enumerate(sessions))
    lease.answered(sync, LeaseGrant("closed", True, (0,), (0,), (), ()), 1.0)
    assert lease.idle


def test_a_closing_lease_resending_a_batch_keeps_the_lease_until_its_held_updates_went() -> None:
    lease = Lease("acme", PLAN, COUNTERS, 0.0, hold_s=30.0)
    one = uuid.uuid4().hex
    finish(lease, turn(one, 1), 0.0)
    unanswered = lease.next_sync([1000], [], 60, 600, now=0.1)
    assert unanswered.batch is not None  # the settlement; the store never answers this call
    finish(lease, turn(one, 2), 0.2)
    lease.closing = True
    again = lease.next_sync([0], [], 60, 600, now=0.3)
    assert again.batch is unanswered.batch  # the same batch again, as every retry
    assert not again.close  # the held turns would be lost with the lease
    lease.answered(again, LeaseGrant("held", True, (0,), (0,), (), ()), 0.3)
    final = lease.next_sync([0], [], 60, 600, now=0.4)
    assert final.close
    assert final.batch is not None
    assert final.batch.session_updates() == (turn(one, 1), turn(one, 2))


def test_without_a_hold_each_update_goes_with_its_settlement() -> None:
    lease = Lease("acme", PLAN, COUNTERS, 0.0)
    one = uuid.uuid4().hex
    settled = [finish(lease, turn(one, n), 0.0) for n in (1, 2)]
    assert not lease.held
    batch = call(lease, 0.1)
    assert batch is not None
    assert batch.sessions is None
    assert batch.settlements == tuple(settled)
    assert batch.session_updates() == (turn(one, 1), turn(one, 2))
