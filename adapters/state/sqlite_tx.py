"""The SQLite store's operations. Each runs inside a write transaction the caller opened
(`sqlite.py`: one `BEGIN IMMEDIATE` per batch; should one operation fail, each runs again
alone), so each is atomic against every other process using the file.

They take the connection and the current time (unix microseconds) first, and implement
exactly the semantics of the Redis scripts in `redis_scripts.py` (the contract tests in
tests/metering/test_store_contract.py run against both).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import orjson

from gateway.metering.records import (
    WINDOW_US,
    IdempotencyClaim,
    LedgerEntry,
    RateState,
    ReserveOutcome,
    ReserveRequest,
    Settlement,
    SpendRow,
    StoredResponse,
)

_SWEEP_BATCH = 100  # expired reservations released per operation, at most
_PURGE_BATCH = 1000  # forgotten settled records deleted at a time, at most
_PURGE_EVERY = 16

_SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (
    tenant TEXT NOT NULL, counter TEXT NOT NULL,
    spent INTEGER NOT NULL DEFAULT 0, reserved INTEGER NOT NULL DEFAULT 0,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, counter)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rates (
    tenant TEXT NOT NULL, counter TEXT NOT NULL, tat_us INTEGER NOT NULL,
    PRIMARY KEY (tenant, counter)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS reservations (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL,
    state TEXT NOT NULL,            -- o: open, e: expired (released), s: settled
    lease_until_us INTEGER NOT NULL,
    forget_at_us INTEGER,           -- settled/expired records are deleted after this
    charges BLOB NOT NULL,          -- JSON [[counter, amount], ...] still reserved while open
    rates BLOB                      -- JSON [[rate counter, increment_us], ...] taken by the reserve
);
CREATE INDEX IF NOT EXISTS reservations_open ON reservations (tenant, state, lease_until_us);
CREATE INDEX IF NOT EXISTS reservations_forget ON reservations (forget_at_us);
CREATE TABLE IF NOT EXISTS ledger (
    tenant TEXT NOT NULL, day TEXT NOT NULL, key_id TEXT NOT NULL, model TEXT NOT NULL,
    requests INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL, cost_micros INTEGER NOT NULL,
    workflow TEXT NOT NULL DEFAULT 'default',
    PRIMARY KEY (tenant, day, key_id, model, workflow)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idempotency (
    tenant TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL,
    state TEXT NOT NULL,            -- f: in flight, d: done
    expires_us INTEGER NOT NULL, status INTEGER, body BLOB,
    PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lease_state (
    id TEXT PRIMARY KEY, seq INTEGER NOT NULL,
    taken BLOB NOT NULL             -- JSON {rate counter: units taken since the lease began}
) WITHOUT ROWID;
"""

_LEDGER_AT = _SCHEMA.index("CREATE TABLE IF NOT EXISTS ledger")
_LEDGER_WITH_WORKFLOW = _SCHEMA[_LEDGER_AT:].split(";", maxsplit=1)[0]


def _add_ledger_workflow(db: sqlite3.Connection) -> None:
    """The workflow joins the ledger's key: the table is rebuilt, its rows kept as "default"."""
    db.execute("ALTER TABLE ledger RENAME TO ledger_without_workflow")
    db.execute(_LEDGER_WITH_WORKFLOW)
    db.execute(
        "INSERT INTO ledger SELECT tenant, day, key_id, model, requests, prompt_tokens, cached_tokens, "
        "completion_tokens, cost_micros, 'default' FROM ledger_without_workflow"
    )
    db.execute("DROP TABLE ledger_without_workflow")


# An expired reservation is remembered as long as a settled one, so a late settle of it
# still counts its spend once and only once.
_EXPIRED_KEEP_US = 3_600 * 1_000_000


def create_schema(db: sqlite3.Connection) -> None:
    with _transaction(db):
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        columns = {row[1] for row in db.execute("PRAGMA table_info(reservations)")}
        if "rates" not in columns:  # a file made before reservations recorded their rate charges
            db.execute("ALTER TABLE reservations ADD COLUMN rates BLOB")
        ledger_columns = {row[1] for row in db.execute("PRAGMA table_info(ledger)")}
        if "workflow" not in ledger_columns:  # a file made before the ledger kept workflows
            _add_ledger_workflow(db)


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _sweep(db: sqlite3.Connection, now_us: int, tenant: str) -> None:
    """Release the tenant's open reservations whose lease has passed."""
    rows = db.execute(
        "SELECT id, charges FROM reservations WHERE tenant = ? AND state = 'o' AND lease_until_us < ? "
        "ORDER BY lease_until_us LIMIT ?",
        (tenant, now_us, _SWEEP_BATCH),
    ).fetchall()
    for reservation_id, charges in rows:
        _release(db, tenant, charges)
        db.execute(
            "UPDATE reservations SET state = 'e', forget_at_us = ? WHERE id = ?",
            (now_us + _EXPIRED_KEEP_US, reservation_id),
        )


def _purge(db: sqlite3.Connection, now_us: int) -> None:
    """Now and then (about one call in _PURGE_EVERY, by the clock's last digits), delete
    settled and expired records past their time, which keeps the table small."""
    if now_us % _PURGE_EVERY == 0:
        db.execute(
            "DELETE FROM reservations WHERE rowid IN "
            "(SELECT rowid FROM reservations WHERE forget_at_us < ? LIMIT ?)",
            (now_us, _PURGE_BATCH),
        )


def _release(db: sqlite3.Connection, tenant: str, charges: bytes) -> None:
    for counter, amount in orjson.loads(charges):
        db.execute(
            "UPDATE counters SET reserved = reserved - ? WHERE tenant = ? AND counter = ?",
            (amount, tenant, counter),
        )


def _used(db: sqlite3.Connection, tenant: str, counter: str) -> int:
    row = db.execute(
        "SELECT spent + reserved FROM counters WHERE tenant = ? AND counter = ?", (tenant, counter)
    ).fetchone()
    return int(row[0]) if row else 0


def _tat(db: sqlite3.Connection, tenant: str, counter: str) -> int | None:
    row = db.execute(
        "SELECT tat_us FROM rates WHERE tenant = ? AND counter = ?", (tenant, counter)
    ).fetchone()
    return int(row[0]) if row else None


def _set_tat(db: sqlite3.Connection, tenant: str, counter: str, tat_us: int) -> None:
    db.execute(
        "INSERT INTO rates (tenant, counter, tat_us) VALUES (?, ?, ?) "
        "ON CONFLICT (tenant, counter) DO UPDATE SET tat_us = excluded.tat_us",
        (tenant, counter, tat_us),
    )


def reserve(db: sqlite3.Connection, now_us: int, request: ReserveRequest) -> ReserveOutcome:
    tenant = request.tenant
    _sweep(db, now_us, tenant)
    _purge(db, now_us)
    tats = [max(_tat(db, tenant, charge.counter) or now_us, now_us) for charge in request.rates]
    new_tats = [tat + charge.increment_us for tat, charge in zip(tats, request.rates, strict=True)]
    admitted = all(new_tat - now_us <= WINDOW_US for new_tat in new_tats)
    if _known(db, request.reservation_id):
        admitted = False  # released (or settled) before it arrived: it takes nothing
    used = [_used(db, tenant, charge.counter) for charge in request.budgets]
    for budget, before in zip(request.budgets, used, strict=True):
        if budget.hard and before + budget.amount > budget.limit:
            admitted = False
    if not admitted:
        # Each limit as it stands without this request, and when it would fit.
        rates = [
            _rate_state(c.per_minute, tat - now_us, max(0, new_tat - now_us - WINDOW_US))
            for c, tat, new_tat in zip(request.rates, tats, new_tats, strict=True)
        ]
        return ReserveOutcome(False, tuple(used), tuple(rates))
    rates = [
        _rate_state(c.per_minute, new_tat - now_us, 0)
        for c, new_tat in zip(request.rates, new_tats, strict=True)
    ]
    for charge, new_tat in zip(request.rates, new_tats, strict=True):
        _set_tat(db, tenant, charge.counter, new_tat)
    for budget in request.budgets:
        db.execute(
            "INSERT INTO counters (tenant, counter, reserved, expires_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (tenant, counter) DO UPDATE SET reserved = reserved + excluded.reserved, "
            "expires_at = max(expires_at, excluded.expires_at)",
            (tenant, budget.counter, budget.amount, budget.expires_at),
        )
    charges = orjson.dumps([[c.counter, c.amount] for c in request.budgets])
    taken = orjson.dumps([[c.counter, c.increment_us] for c in request.rates]) if request.rates else None
    db.execute(
        "INSERT INTO reservations (id, tenant, state, lease_until_us, charges, rates) "
        "VALUES (?, ?, 'o', ?, ?, ?)",
        (request.reservation_id, tenant, now_us + round(request.lease_s * 1_000_000), charges, taken),
    )
    after = tuple(u + c.amount for u, c in zip(used, request.budgets, strict=True))
    return ReserveOutcome(True, after, tuple(rates))


def _known(db: sqlite3.Connection, reservation_id: str) -> bool:
    row = db.execute("SELECT 1 FROM reservations WHERE id = ?", (reservation_id,)).fetchone()
    return row is not None


def _give_back(db: sqlite3.Connection, now_us: int, tenant: str, counter: str, increment_us: int) -> None:
    tat = _tat(db, tenant, counter)
    if tat is not None:
        _set_tat(db, tenant, counter, max(now_us, tat - increment_us))


def _rate_state(per_minute: int, backlog_us: int, retry_us: int) -> RateState:
    remaining = (WINDOW_US - backlog_us) * per_minute // WINDOW_US
    return RateState(per_minute, max(0, remaining), backlog_us / 1e6, retry_us / 1e6)


def settle(db: sqlite3.Connection, now_us: int, settlement: Settlement) -> bool:
    tenant = settlement.tenant
    row = db.execute(
        "SELECT state, charges, rates FROM reservations WHERE id = ?", (settlement.reservation_id,)
    ).fetchone()
    if row is not None and row[0] == "s":
        return False
    if row is not None and row[0] == "o":
        _release(db, tenant, row[1])
        if settlement.release and row[2] is not None:
            for counter, increment_us in orjson.loads(row[2]):
                _give_back(db, now_us, tenant, counter, increment_us)
    _purge(db, now_us)
    for counter, amount, expires_at in settlement.spent:
        db.execute(
            "INSERT INTO counters (tenant, counter, spent, expires_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (tenant, counter) DO UPDATE SET spent = spent + excluded.spent, "
            "expires_at = max(expires_at, excluded.expires_at)",
            (tenant, counter, amount, expires_at),
        )
    for refund in settlement.refunds:
        _give_back(db, now_us, tenant, refund.counter, refund.increment_us)
    if settlement.ledger is not None:
        add_ledger(db, tenant, settlement.ledger)
    db.execute(
        "INSERT INTO reservations (id, tenant, state, lease_until_us, forget_at_us, charges) "
        "VALUES (?, ?, 's', ?, ?, '[]') ON CONFLICT (id) DO UPDATE SET state = 's', "
        "forget_at_us = excluded.forget_at_us, charges = '[]'",
        (settlement.reservation_id, tenant, now_us, now_us + settlement.keep_s * 1_000_000),
    )
    return True


def add_ledger(db: sqlite3.Connection, tenant: str, entry: LedgerEntry) -> None:
    db.execute(
        "INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (tenant, day, key_id, model, workflow) DO UPDATE SET "
        "requests = requests + excluded.requests, "
        "prompt_tokens = prompt_tokens + excluded.prompt_tokens, "
        "cached_tokens = cached_tokens + excluded.cached_tokens, "
        "completion_tokens = completion_tokens + excluded.completion_tokens, "
        "cost_micros = cost_micros + excluded.cost_micros",
        (
            tenant,
            entry.day,
            entry.key_id,
            entry.model,
            entry.requests,
            entry.prompt_tokens,
            entry.cached_tokens,
            entry.completion_tokens,
            entry.cost_micros,
            entry.workflow,
        ),
    )


def counters(db: sqlite3.Connection, now_us: int, tenant: str, names: tuple[str, ...]) -> tuple[int, ...]:
    _sweep(db, now_us, tenant)
    return tuple(_used(db, tenant, name) for name in names)


def open_reservations(db: sqlite3.Connection, now_us: int, tenant: str) -> int:
    _sweep(db, now_us, tenant)
    row = db.execute(
        "SELECT count(*) FROM reservations WHERE tenant = ? AND state = 'o'", (tenant,)
    ).fetchone()
    return int(row[0])


def claim_idempotency(
    db: sqlite3.Connection, now_us: int, tenant: str, key: str, fingerprint: str, lease_s: float
) -> IdempotencyClaim:
    row = db.execute(
        "SELECT fingerprint, state, status, body FROM idempotency "
        "WHERE tenant = ? AND key = ? AND expires_us > ?",
        (tenant, key, now_us),
    ).fetchone()
    if row is not None:
        if row[0] != fingerprint:
            return IdempotencyClaim("mismatch")
        if row[1] == "d":
            return IdempotencyClaim("done", StoredResponse(int(row[2]), bytes(row[3])))
        return IdempotencyClaim("in_flight")
    db.execute(
        "INSERT INTO idempotency (tenant, key, fingerprint, state, expires_us) VALUES (?, ?, ?, 'f', ?) "
        "ON CONFLICT (tenant, key) DO UPDATE SET fingerprint = excluded.fingerprint, state = 'f', "
        "expires_us = excluded.expires_us, status = NULL, body = NULL",
        (tenant, key, fingerprint, now_us + round(lease_s * 1_000_000)),
    )
    return IdempotencyClaim("claimed")


def complete_idempotency(
    db: sqlite3.Connection,
    now_us: int,
    tenant: str,
    key: str,
    fingerprint: str,
    response: StoredResponse,
    ttl_s: float,
) -> None:
    db.execute(
        "UPDATE idempotency SET state = 'd', status = ?, body = ?, expires_us = ? "
        "WHERE tenant = ? AND key = ? AND fingerprint = ?",
        (response.status, response.body, now_us + round(ttl_s * 1_000_000), tenant, key, fingerprint),
    )
    # Forget the tenant's keys whose time is up, so the table does not grow without bound.
    db.execute("DELETE FROM idempotency WHERE tenant = ? AND expires_us < ?", (tenant, now_us))


def release_idempotency(db: sqlite3.Connection, now_us: int, tenant: str, key: str) -> None:
    db.execute("DELETE FROM idempotency WHERE tenant = ? AND key = ? AND state = 'f'", (tenant, key))


def spend(
    db: sqlite3.Connection, now_us: int, tenants: tuple[str, ...], since: str, until: str
) -> list[SpendRow]:
    rows = []
    for tenant in tenants:
        rows += db.execute(
            "SELECT tenant, day, key_id, model, requests, prompt_tokens, cached_tokens, completion_tokens, "
            "cost_micros, workflow FROM ledger WHERE tenant = ? AND day >= ? AND day <= ? "
            "ORDER BY day, key_id, model, workflow",
            (tenant, since, until),
        ).fetchall()
    return [SpendRow(*row) for row in rows]
