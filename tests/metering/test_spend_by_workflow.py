"""The ledger by workflow, on every store: rows kept apart per workflow, reports grouped by
any dimension summing exactly to the same total; files and keys from before the ledger kept
workflows still read (as "default")."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from pathlib import Path

import pytest
import redis
import yaml

from adapters.state.redis import RedisStore
from adapters.state.sqlite import SQLiteStore
from gateway.cli import main
from gateway.metering.records import LedgerEntry, Settlement
from gateway.metering.report import GROUPS, grouped, spend_document, spend_table
from gateway.ports import StateStore
from tests.metering.conftest import REDIS_URL

DAY = "2026-11-22"


def settled(tenant: str, entry: LedgerEntry) -> Settlement:
    return Settlement(tenant, uuid.uuid4().hex, (), (), entry, 900)


async def test_spend_by_workflow_sums_exactly_to_spend_by_tenant(store: StateStore) -> None:
    entries = [
        ("acme", LedgerEntry(DAY, "k1", "m1", 100, 0, 10, 1_001, workflow="extraction")),
        ("acme", LedgerEntry(DAY, "k1", "m1", 100, 20, 10, 2_003, workflow="chat")),
        ("acme", LedgerEntry(DAY, "k1", "m1", 50, 0, 5, 7, workflow="extraction")),
        ("acme", LedgerEntry(DAY, "k2", "m2", 1, 0, 1, 333_333, workflow="other")),
        ("globex", LedgerEntry(DAY, "k9", "m1", 3, 0, 3, 11, workflow="chat")),
        ("globex", LedgerEntry(DAY, "k9", "m2", 3, 0, 3, 13)),
    ]
    for tenant, entry in entries:
        assert await store.settle(settled(tenant, entry))
    rows = await store.spend(("acme", "globex"), DAY, DAY)
    extraction = [r for r in rows if r.tenant == "acme" and r.workflow == "extraction"]
    assert [(r.requests, r.prompt_tokens, r.cost_micros) for r in extraction] == [(2, 150, 1_008)]
    by_workflow = {g["workflow"]: g["cost_micros"] for g in grouped(rows, "workflow")}
    assert by_workflow == {"chat": 2_014, "default": 13, "extraction": 1_008, "other": 333_333}
    by_tenant = {g["tenant"]: g["cost_micros"] for g in grouped(rows, "tenant")}
    assert by_tenant == {"acme": 336_344, "globex": 24}
    assert (
        sum(by_workflow.values()) == sum(by_tenant.values()) == sum(cost.cost_micros for _, cost in entries)
    )
    for dimension in GROUPS:
        groups = grouped(rows, dimension)
        for count in ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_micros"):
            assert sum(g[count] for g in groups) == sum(getattr(r, count) for r in rows)


def test_a_grouped_report_names_its_dimension_and_keeps_the_total() -> None:
    rows_doc = spend_document([], "2026-11-01", "2026-11-30", "workflow")
    assert rows_doc["group_by"] == "workflow"
    assert rows_doc["data"] == []
    assert "total" in spend_table([], "workflow")


def test_a_state_file_from_before_workflows_keeps_its_ledger(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE ledger (tenant TEXT NOT NULL, day TEXT NOT NULL, key_id TEXT NOT NULL, "
        "model TEXT NOT NULL, requests INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL, "
        "cached_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, cost_micros INTEGER NOT NULL, "
        "PRIMARY KEY (tenant, day, key_id, model)) WITHOUT ROWID"
    )
    db.execute("INSERT INTO ledger VALUES ('acme', ?, 'k1', 'm1', 4, 40, 0, 8, 77)", (DAY,))
    db.commit()
    db.close()

    async def check() -> None:
        store = SQLiteStore(path)
        try:
            assert await store.settle(
                settled("acme", LedgerEntry(DAY, "k1", "m1", 1, 0, 1, 5, workflow="chat"))
            )
            rows = await store.spend(("acme",), DAY, DAY)
            assert [(r.workflow, r.requests, r.cost_micros) for r in rows] == [
                ("chat", 1, 5),
                ("default", 4, 77),
            ]
        finally:
            await store.aclose()

    asyncio.run(check())


@pytest.fixture
def legacy_prefix(redis_prefix: str) -> str:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        fields = {f"k1\tm1\t{name}": value for name, value in (("requests", 4), ("cost_micros", 77))}
        client.hset(f"{redis_prefix}:{{acme}}:l:{DAY}", mapping=fields)
    finally:
        client.close()
    return redis_prefix


async def test_redis_ledger_fields_from_before_workflows_read_as_default(legacy_prefix: str) -> None:
    store = RedisStore(REDIS_URL, legacy_prefix)
    try:
        rows = await store.spend(("acme",), DAY, DAY)
    finally:
        await store.aclose()
    assert [(r.key_id, r.model, r.workflow, r.requests, r.cost_micros) for r in rows] == [
        ("k1", "m1", "default", 4, 77)
    ]


def test_tollgate_spend_groups_by_workflow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state.db"
    config = tmp_path / "tollgate.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "upstreams": {"local": {"kind": "openai_compat", "base_url": "http://127.0.0.1:9/v1"}},
                "models": {"chat": [{"upstream": "local", "model": "m1"}]},
                "tenants": {"acme": {}, "globex": {}},
                "state": {"store": "sqlite", "sqlite_path": str(state)},
            }
        )
    )

    async def fill() -> None:
        store = SQLiteStore(state)
        try:
            for tenant, workflow, cost in (
                ("acme", "extraction", 1_000),
                ("acme", "chat", 2_500),
                ("globex", "chat", 500),
            ):
                entry = LedgerEntry(DAY, "k1", "m1", 10, 0, 5, cost, workflow=workflow)
                assert await store.settle(settled(tenant, entry))
        finally:
            await store.aclose()

    asyncio.run(fill())
    range_args = ["--since", DAY, "--until", DAY]
    assert main(["spend", "--config", str(config), "--by", "workflow", *range_args]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:2] == ["workflow", "requests"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["chat"][1] == "2" and rows["chat"][-1] == "0.003000"
    assert rows["extraction"][-1] == "0.001000"
    assert rows["total"][-1] == "0.004000"
    assert main(["spend", "--config", str(config), "--by", "tenant", "--json", *range_args]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["group_by"] == "tenant"
    assert {e["tenant"]: e["cost_micros"] for e in document["data"]} == {"acme": 3_500, "globex": 500}
