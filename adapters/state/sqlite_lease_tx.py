"""The SQLite store's lease call (`StateStore.lease`), inside the caller's write transaction,
with exactly the semantics of the Redis script in `redis_lease.py`.

The lease is a row of `reservations` (state o, its budget holds in `charges`), so the sweep
of every other operation releases its holds when it expires and `open_reservations` counts
it; `lease_state` (made with the rest of the schema, `sqlite_tx.py`) keeps its sequence
number and the rate units taken. A batch marks its id settled in `reservations`, as a
settle marks a request's, and updates the session records of its settlements in the same
transaction, one after another in the batch's order (`sqlite_sessions.apply`).
"""

from __future__ import annotations

import sqlite3

import orjson

from adapters.state import sqlite_sessions, sqlite_tx
from adapters.state.lease_batch import fold
from gateway.metering.lease_records import LeaseGrant, LeaseSync, SettleBatch
from gateway.metering.records import WINDOW_US, LedgerEntry, RateState


def lease(db: sqlite3.Connection, now_us: int, sync: LeaseSync) -> LeaseGrant:
    tenant = sync.tenant
    sqlite_tx.counters(db, now_us, tenant, ())  # the sweep
    applied = sync.batch is not None and _apply_batch(db, now_us, tenant, sync.batch)
    row = db.execute("SELECT state, charges FROM reservations WHERE id = ?", (sync.lease_id,)).fetchone()
    state = row[0] if row is not None else None
    held = db.execute("SELECT seq, taken FROM lease_state WHERE id = ?", (sync.lease_id,)).fetchone()
    holds = dict(orjson.loads(row[1])) if state == "o" else {}
    taken = orjson.loads(held[1]) if held is not None and state == "o" else {}
    keep_us = (sync.batch.keep_s if sync.batch is not None else 900) * 1_000_000
    if state in ("s", "e") or (state is None and sync.close):
        if state is None:
            _mark_settled(db, now_us, tenant, sync.lease_id, keep_us)
        db.execute("DELETE FROM lease_state WHERE id = ?", (sync.lease_id,))
        return _unchanged("closed", applied, db, tenant, sync, holds, taken)
    if state == "o" and held is not None and held[0] >= sync.seq:
        return _unchanged("stale", applied, db, tenant, sync, holds, taken)
    new_holds, used = _set_holds(db, tenant, sync, holds)
    new_taken, states = _set_rates(db, now_us, tenant, sync, taken)
    if sync.close:  # nothing stays held, whatever was asked
        for budget, hold in zip(sync.budgets, new_holds, strict=True):
            if hold:
                db.execute(
                    "UPDATE counters SET reserved = reserved - ? WHERE tenant = ? AND counter = ?",
                    (hold, tenant, budget.counter),
                )
        db.execute("DELETE FROM lease_state WHERE id = ?", (sync.lease_id,))
        _mark_settled(db, now_us, tenant, sync.lease_id, keep_us)
        gone = tuple(u - h for u, h in zip(used, new_holds, strict=True))
        return LeaseGrant("closed", applied, (0,) * len(gone), gone, tuple(new_taken), tuple(states))
    charges = orjson.dumps([[b.counter, h] for b, h in zip(sync.budgets, new_holds, strict=True)])
    lease_until = now_us + round(sync.lease_s * 1_000_000)
    db.execute(
        "INSERT INTO reservations (id, tenant, state, lease_until_us, charges) VALUES (?, ?, 'o', ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET lease_until_us = excluded.lease_until_us, charges = excluded.charges",
        (sync.lease_id, tenant, lease_until, charges),
    )
    units = orjson.dumps({r.counter: t for r, t in zip(sync.rates, new_taken, strict=True)})
    db.execute(
        "INSERT INTO lease_state (id, seq, taken) VALUES (?, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, taken = excluded.taken",
        (sync.lease_id, sync.seq, units),
    )
    return LeaseGrant("held", applied, tuple(new_holds), tuple(used), tuple(new_taken), tuple(states))


def _set_holds(
    db: sqlite3.Connection, tenant: str, sync: LeaseSync, holds: dict[str, int]
) -> tuple[list[int], list[int]]:
    """Each budget's new hold (asked, within a hard limit, never below the floor) and the
    counter's spent + reserved after it."""
    new_holds, used = [], []
    for budget in sync.budgets:
        old = holds.get(budget.counter, 0)
        others = sqlite_tx._used(db, tenant, budget.counter) - old
        new = budget.want
        if budget.hard:
            new = min(new, budget.limit - others)
        new = max(new, budget.floor, 0)
        if new != old:
            db.execute(
                "INSERT INTO counters (tenant, counter, reserved, expires_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (tenant, counter) DO UPDATE SET reserved = reserved + excluded.reserved, "
                "expires_at = max(expires_at, excluded.expires_at)",
                (tenant, budget.counter, new - old, budget.expires_at),
            )
        new_holds.append(new)
        used.append(others + new)
    return new_holds, used


def _set_rates(
    db: sqlite3.Connection, now_us: int, tenant: str, sync: LeaseSync, taken: dict[str, int]
) -> tuple[list[int], list[RateState]]:
    """Each rate limit's units taken into the lease (what fits in the window, never below the
    floor; a lower want gives the rest back) and the limit as it then stands."""
    new_taken, states = [], []
    for rate in sync.rates:
        old = int(taken.get(rate.counter, 0))
        tat = max(sqlite_tx._tat(db, tenant, rate.counter) or now_us, now_us)
        new = old
        if rate.want > old:
            grant = min(rate.want - old, (WINDOW_US - (tat - now_us)) * rate.per_minute // WINDOW_US)
            if grant > 0:
                new = old + grant
                tat += -(-grant * WINDOW_US // rate.per_minute)
        elif rate.want < old:
            new = rate.want
            tat = max(now_us, tat - (old - rate.want) * WINDOW_US // rate.per_minute)
        new = max(new, rate.floor)
        if new != old:
            sqlite_tx._set_tat(db, tenant, rate.counter, tat)
        new_taken.append(new)
        remaining = max(0, (WINDOW_US - (tat - now_us)) * rate.per_minute // WINDOW_US)
        states.append(RateState(rate.per_minute, remaining, (tat - now_us) / 1e6, 0.0))
    return new_taken, states


def _unchanged(
    state: str,
    applied: bool,
    db: sqlite3.Connection,
    tenant: str,
    sync: LeaseSync,
    holds: dict[str, int],
    taken: dict[str, int],
) -> LeaseGrant:
    return LeaseGrant(
        "closed" if state == "closed" else "stale",
        applied,
        tuple(holds.get(b.counter, 0) for b in sync.budgets),
        tuple(sqlite_tx._used(db, tenant, b.counter) for b in sync.budgets),
        tuple(int(taken.get(r.counter, 0)) for r in sync.rates),
        tuple(RateState(r.per_minute, 0, 0.0, 0.0) for r in sync.rates),
    )


def _mark_settled(db: sqlite3.Connection, now_us: int, tenant: str, record_id: str, keep_us: int) -> None:
    db.execute(
        "INSERT INTO reservations (id, tenant, state, lease_until_us, forget_at_us, charges) "
        "VALUES (?, ?, 's', ?, ?, '[]') ON CONFLICT (id) DO UPDATE SET state = 's', "
        "forget_at_us = excluded.forget_at_us, charges = '[]'",
        (record_id, tenant, now_us, now_us + keep_us),
    )


def _apply_batch(db: sqlite3.Connection, now_us: int, tenant: str, batch: SettleBatch) -> bool:
    """Add the batch's spend, refunds, ledger rows and session updates, unless its id is
    already settled."""
    if db.execute("SELECT 1 FROM reservations WHERE id = ?", (batch.batch_id,)).fetchone():
        return False
    folded = fold(batch)
    for counter, (amount, expires_at) in folded.spent.items():
        db.execute(
            "INSERT INTO counters (tenant, counter, spent, expires_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (tenant, counter) DO UPDATE SET spent = spent + excluded.spent, "
            "expires_at = max(expires_at, excluded.expires_at)",
            (tenant, counter, amount, expires_at),
        )
    for counter, increment_us in folded.refunds.items():
        sqlite_tx._give_back(db, now_us, tenant, counter, increment_us)
    for day, rows in folded.ledger.items():
        for (key_id, model, workflow), sums in rows.items():
            entry = LedgerEntry(day, key_id, model, sums[1], sums[2], sums[3], sums[4], sums[0], workflow)
            sqlite_tx.add_ledger(db, tenant, entry)
    for update in batch.session_updates():
        sqlite_sessions.apply(db, now_us, update)
    _mark_settled(db, now_us, tenant, batch.batch_id, batch.keep_s * 1_000_000)
    return True
