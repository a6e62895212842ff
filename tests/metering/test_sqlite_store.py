"""The SQLite store's transactions (adapters/state/sqlite.py): an operation that fails
leaves nothing behind, whether it ran alone or in a group commit with others."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.state.sqlite import SQLiteStore
from gateway.errors import StateStoreUnavailable
from gateway.metering.records import LedgerEntry, RateCharge, ReserveRequest, Settlement

COUNTER = "t:day:2026-11-22:usd"


def half_then_fail(db: sqlite3.Connection, now_us: int) -> None:
    db.execute(
        "INSERT INTO counters (tenant, counter, spent, expires_at) VALUES ('acme', ?, 999, 0)", (COUNTER,)
    )
    raise sqlite3.IntegrityError("failed half-way")


def hold_the_thread(db: sqlite3.Connection, now_us: int) -> None:
    time.sleep(0.2)


def a_settlement(spent: int) -> Settlement:
    entry = LedgerEntry("2026-11-22", "key1", "m1", 10, 0, 5, spent)
    return Settlement("acme", f"r{spent}", ((COUNTER, spent, 4_102_444_800),), (), entry, 600)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    made = SQLiteStore(tmp_path / "state.db")
    yield made
    await made.aclose()


async def test_an_operation_alone_that_fails_is_rolled_back_whole(store: SQLiteStore) -> None:
    with pytest.raises(StateStoreUnavailable, match="failed half-way"):
        await store._run(half_then_fail)
    assert await store.counters("acme", (COUNTER,)) == (0,)
    assert await store.settle(a_settlement(7))  # the store goes on
    assert await store.counters("acme", (COUNTER,)) == (7,)


async def test_in_a_group_commit_only_the_failing_operation_is_rolled_back(store: SQLiteStore) -> None:
    holding = asyncio.ensure_future(store._run(hold_the_thread))
    await asyncio.sleep(0.05)  # the store's thread is busy: the next three go in one transaction
    outcomes = await asyncio.gather(
        store.settle(a_settlement(3)),
        store._run(half_then_fail),
        store.settle(a_settlement(4)),
        return_exceptions=True,
    )
    await holding
    assert outcomes[0] is True
    assert isinstance(outcomes[1], StateStoreUnavailable)
    assert outcomes[2] is True
    assert await store.counters("acme", (COUNTER,)) == (7,)
    [row] = await store.spend(("acme",), "2026-11-22", "2026-11-22")
    assert (row.requests, row.cost_micros) == (2, 7)


def in_the_database_file(path: Path) -> int | None:
    """The counter as the database file alone has it, the write-ahead log ignored; None
    while the file has no such row, or cannot be read yet."""
    db = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        row = db.execute("SELECT spent FROM counters WHERE counter = ?", (COUNTER,)).fetchone()
    except sqlite3.DatabaseError:
        # No table yet (even the schema is only in the log), or, as an immutable reader
        # takes no lock, a page read while a checkpoint was writing it ("malformed").
        return None
    finally:
        db.close()
    return int(row[0]) if row else None


async def test_the_log_is_checkpointed_by_the_stores_own_thread(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SQLiteStore(path, checkpoint_interval_s=0.05)
    try:
        assert await store.settle(a_settlement(7))
        in_the_file = None
        for _ in range(200):
            in_the_file = in_the_database_file(path)
            if in_the_file == 7:
                break
            await asyncio.sleep(0.025)
        assert in_the_file == 7
    finally:
        await store.aclose()
    assert store._checkpointer.checkpoints > 0
    assert store._checkpointer._thread is None  # stopped with the store


async def test_a_commit_leaves_its_pages_in_the_log_for_that_thread(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SQLiteStore(path, checkpoint_interval_s=0)  # no checkpoint thread
    try:
        for n in range(1, 51):
            assert await store.settle(a_settlement(n))
        await asyncio.sleep(0.2)
        assert in_the_database_file(path) is None  # no request's COMMIT copied the log back
        assert await store.counters("acme", (COUNTER,)) == (sum(range(1, 51)),)
    finally:
        await store.aclose()


async def test_a_file_from_before_reservations_kept_their_rate_charges_is_brought_up_to_date(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE reservations (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, state TEXT NOT NULL, "
            "lease_until_us INTEGER NOT NULL, forget_at_us INTEGER, charges BLOB NOT NULL)"
        )
        db.execute("INSERT INTO reservations VALUES ('old', 'acme', 'o', 9000000000000000, NULL, '[]')")
    store = SQLiteStore(path)
    try:
        rpm = RateCharge("t:rpm", 1, 1)
        request = ReserveRequest("acme", "new", (), (rpm,), 60)
        assert (await store.reserve(request)).admitted
        assert await store.settle(Settlement("acme", "new", (), (), None, 600, release=True))
        assert await store.settle(Settlement("acme", "old", (), (), None, 600, release=True))
        assert (await store.reserve(ReserveRequest("acme", "next", (), (rpm,), 60))).admitted
    finally:
        await store.aclose()
