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
from gateway.metering.records import LedgerEntry, Settlement

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
