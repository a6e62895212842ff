"""The SQLite store's session records: one row per (tenant, session key), updated inside the
transaction of the settle that carries it (`sqlite_tx.settle`) or alone, with the same
semantics as the Redis script in `redis_sessions.py`."""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from gateway.sessions.records import Checkpoint, SessionRecord, SessionUpdate

_PURGE_EVERY = 16
_PURGE_BATCH = 1000

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    tenant TEXT NOT NULL, session TEXT NOT NULL,
    first_seen_us INTEGER NOT NULL, last_seen_us INTEGER NOT NULL, expires_us INTEGER NOT NULL,
    turns INTEGER NOT NULL, input_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL, cost_micros INTEGER NOT NULL,
    first_input INTEGER NOT NULL, last_input INTEGER NOT NULL, last_growth INTEGER NOT NULL,
    model TEXT NOT NULL, upstream TEXT NOT NULL, replica INTEGER NOT NULL, workflow TEXT NOT NULL,
    decisions BLOB NOT NULL,        -- JSON [decision id, ...], newest last
    decisions_dropped INTEGER NOT NULL,
    due TEXT NOT NULL, due_turn INTEGER NOT NULL,
    checkpoints BLOB NOT NULL,      -- JSON [[turn, messages, digest, summary, before, after], ...]
    PRIMARY KEY (tenant, session)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sessions_seen ON sessions (tenant, last_seen_us);
CREATE INDEX IF NOT EXISTS sessions_expiry ON sessions (expires_us);
"""

_COLUMNS = (
    "tenant, session, first_seen_us, last_seen_us, turns, input_tokens, cached_tokens, output_tokens, "
    "cost_micros, first_input, last_input, last_growth, model, upstream, replica, workflow, decisions, "
    "decisions_dropped, due, due_turn, checkpoints"
)
_ORDER = {"tokens": "input_tokens + output_tokens", "spend": "cost_micros", "last_seen": "last_seen_us"}


def create_schema(db: sqlite3.Connection) -> None:
    """Run inside the caller's schema transaction."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


def apply(db: sqlite3.Connection, now_us: int, update: SessionUpdate) -> None:
    found = get(db, now_us, update.tenant, update.session)
    if now_us % _PURGE_EVERY == 0:
        db.execute(
            "DELETE FROM sessions WHERE (tenant, session) IN "
            "(SELECT tenant, session FROM sessions WHERE expires_us < ? LIMIT ?)",
            (now_us, _PURGE_BATCH),
        )
    turns = (found.turns if found else 0) + update.turn
    first_input = found.first_input if found and found.turns else update.input_tokens
    last_input, last_growth = (found.last_input, found.last_growth) if found else (0, 0)
    if update.turn:
        last_growth = update.input_tokens - last_input if found and found.turns else 0
        last_input = update.input_tokens
    decisions = list(found.decision_ids) if found else []
    dropped = found.decisions_dropped if found else 0
    if update.decision_ids:
        decisions.extend(update.decision_ids)
        excess = max(0, len(decisions) - update.max_decisions)
        decisions, dropped = decisions[excess:], dropped + excess
    checkpoints = [_row(c) for c in found.checkpoints] if found else []
    if update.checkpoint is not None:
        checkpoints = [*checkpoints, _row(update.checkpoint)][-update.max_checkpoints :]
    due, due_turn = (found.due, found.due_turn) if found else ("", 0)
    if update.due:
        due, due_turn = update.due, turns
    served = update.model != ""
    values: tuple[Any, ...] = (
        update.tenant,
        update.session,
        found.first_seen_us if found else now_us,
        now_us,
        now_us + update.idle_s * 1_000_000,
        turns,
        (found.input_tokens if found else 0) + update.input_tokens,
        (found.cached_tokens if found else 0) + update.cached_tokens,
        (found.output_tokens if found else 0) + update.output_tokens,
        (found.cost_micros if found else 0) + update.cost_micros,
        first_input,
        last_input,
        last_growth,
        update.model if served else (found.model if found else ""),
        update.upstream if served else (found.upstream if found else ""),
        update.replica if served else (found.replica if found else 0),
        update.workflow or (found.workflow if found else ""),
        orjson.dumps(decisions),
        dropped,
        due,
        due_turn,
        orjson.dumps(checkpoints),
    )
    db.execute(
        "INSERT OR REPLACE INTO sessions (tenant, session, first_seen_us, last_seen_us, expires_us, turns, "
        "input_tokens, cached_tokens, output_tokens, cost_micros, first_input, last_input, last_growth, "
        "model, upstream, replica, workflow, decisions, decisions_dropped, due, due_turn, checkpoints) "
        "VALUES (" + ", ".join("?" * len(values)) + ")",
        values,
    )


# The queries below are built from this module's constants (columns, sort orders) and
# placeholders; every value is bound.
def get(
    db: sqlite3.Connection, now_us: int, tenant: str, session: str, decisions: bool = True
) -> SessionRecord | None:
    row = db.execute(
        f"SELECT {_COLUMNS} FROM sessions WHERE tenant = ? AND session = ? AND expires_us >= ?",  # noqa: S608
        (tenant, session, now_us),
    ).fetchone()
    return _record(row, decisions) if row is not None else None


def listed(
    db: sqlite3.Connection, now_us: int, tenants: tuple[str, ...], sort: str, limit: int
) -> list[SessionRecord]:
    marks = ", ".join("?" * len(tenants))
    rows = db.execute(
        f"SELECT {_COLUMNS} FROM sessions WHERE tenant IN ({marks}) AND expires_us >= ? "  # noqa: S608
        f"ORDER BY {_ORDER[sort]} DESC, session LIMIT ?",
        (*tenants, now_us, limit),
    ).fetchall()
    return [_record(row) for row in rows]


def _row(checkpoint: Checkpoint) -> list[Any]:
    c = checkpoint
    return [c.turn, c.messages, c.digest, c.summary, c.tokens_before, c.tokens_after]


def _record(row: tuple[Any, ...], decisions_listed: bool = True) -> SessionRecord:
    (tenant, session, first, last, turns, inp, cached, out, cost, fi, li, growth) = row[:12]
    model, upstream, replica, workflow, decisions, dropped, due, due_turn, checkpoints = row[12:]
    return SessionRecord(
        tenant,
        session,
        first,
        last,
        turns,
        inp,
        cached,
        out,
        cost,
        fi,
        li,
        growth,
        model,
        upstream,
        replica,
        workflow,
        tuple(orjson.loads(decisions)) if decisions_listed else (),
        dropped,
        due,
        due_turn,
        tuple(Checkpoint(*c) for c in orjson.loads(checkpoints)),
    )
