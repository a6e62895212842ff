"""`tollgate keys create --store | list | revoke | rotate` against real stores (a SQLite file,
Redis), with the audit record of each change in the decision log."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.cli import main
from gateway.keys import hash_key, key_id
from tests.metering.conftest import REDIS_URL
from tests.metering.processes import write_config


@pytest.fixture(params=["sqlite", "redis"])
def config(request: pytest.FixtureRequest, tmp_path: Path, redis_prefix: str) -> Path:
    state: dict[str, Any] = (
        {"store": "sqlite", "sqlite_path": str(tmp_path / "state.db")}
        if request.param == "sqlite"
        else {"store": "redis", "redis_url": REDIS_URL, "key_prefix": redis_prefix}
    )
    data = {
        "upstreams": {"local": {"kind": "openai_compat", "base_url": "http://127.0.0.1:9/v1"}},
        "models": {"chat": [{"upstream": "local", "model": "m"}]},
        "tenants": {"acme": {}, "beta": {}},
        "state": state,
        "live_keys": {},
        "routing": {"workflows": ["nightly"]},
        "audit": {"sink": "jsonl", "path": str(tmp_path / "audit.jsonl")},
    }
    return write_config(tmp_path / "tollgate.yaml", data)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def listed(capsys: pytest.CaptureFixture[str], config: Path, *extra: str) -> list[dict[str, Any]]:
    code, out, _ = run(capsys, "keys", "list", "--json", "--config", str(config), *extra)
    assert code == 0
    data: list[dict[str, Any]] = orjson.loads(out)["data"]
    return data


def test_keys_are_created_listed_rotated_and_revoked_in_the_store(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    code, out, err = run(
        capsys,
        *("keys", "create", "--store", "--config", str(config), "--tenant", "acme", "--label", "batch"),
        *("--expires-in", "30d", "--workflow", "nightly", "--priority", "background"),
        *("--labels", "team=search", "--labels", "env=prod"),
        *("--budget", "day:usd=5", "--budget", "month:tokens=2000000:soft", "--rpm", "60"),
    )
    assert code == 0, err
    key = out.strip()
    kid = key_id(hash_key(key))
    assert kid in err and key not in err
    run(capsys, "keys", "create", "--store", "--config", str(config), "--tenant", "beta")
    [shown] = listed(capsys, config, "--tenant", "acme")
    assert shown["id"] == kid and shown["state"] == "active"
    assert (shown["label"], shown["workflow"], shown["priority"]) == ("batch", "nightly", "background")
    assert shown["labels"] == {"env": "prod", "team": "search"}
    assert shown["budgets"] == [
        {"window": "day", "usd": 5.0, "kind": "hard"},
        {"window": "month", "tokens": 2000000, "kind": "soft"},
    ]
    assert shown["rate_limits"] == {"requests_per_minute": 60}
    assert shown["expires_at"] is not None
    assert len(listed(capsys, config)) == 2

    code, out, _ = run(capsys, "keys", "rotate", kid, "--overlap", "10m", "--config", str(config))
    assert code == 0
    new_key = out.strip()
    new_id = key_id(hash_key(new_key))
    by_id = {k["id"]: k for k in listed(capsys, config, "--tenant", "acme")}
    assert by_id[new_id]["rotated_from"] == kid and by_id[new_id]["budgets"] == shown["budgets"]
    assert by_id[kid]["expires_at"] < shown["expires_at"]  # ends with the overlap

    code, out, _ = run(capsys, "keys", "revoke", new_id, "--config", str(config))
    assert code == 0 and new_id in out
    assert {k["id"]: k["state"] for k in listed(capsys, config, "--tenant", "acme")}[new_id] == "revoked"
    code, out, _ = run(capsys, "keys", "list", "--config", str(config))
    assert code == 0 and "revoked" in out and "batch" in out

    lines = (tmp_path / "audit.jsonl").read_bytes().splitlines()
    records = [orjson.loads(line) for line in lines]
    assert [(r["action"], r["key_id"]) for r in records] == [
        ("create", kid),
        ("create", records[1]["key_id"]),
        ("rotate", kid),
        ("revoke", new_id),
    ]
    assert {r["by"] for r in records} == {f"cli:{getpass.getuser()}"}
    text = (tmp_path / "audit.jsonl").read_text()
    for secret in (key, new_key):
        assert secret not in text and hash_key(secret).removeprefix("sha256:") not in text


def test_refusals_are_clear_and_change_nothing(capsys: pytest.CaptureFixture[str], config: Path) -> None:
    base = ("--config", str(config))
    code, _, err = run(capsys, "keys", "create", "--store", *base, "--tenant", "nobody")
    assert code == 1 and "Unknown tenant 'nobody'" in err
    code, _, err = run(
        capsys, "keys", "create", "--store", *base, "--tenant", "acme", "--budget", "week:usd=1"
    )
    assert code == 2 and "--budget" in err
    code, _, err = run(
        capsys, "keys", "create", "--store", *base, "--tenant", "acme", "--workflow", "Bad Name"
    )
    assert code == 1 and "workflow" in err
    code, _, err = run(capsys, "keys", "create", "--store", *base, "--tenant", "acme", "--workflow", "weekly")
    assert code == 1 and "Unknown workflow 'weekly'" in err and "nightly" in err
    code, _, err = run(capsys, "keys", "revoke", "000000000000", *base)
    assert code == 1 and "No live key" in err
    assert listed(capsys, config) == []


def test_a_config_without_live_keys_is_refused_with_what_to_add(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = {
        "upstreams": {"local": {"kind": "openai_compat", "base_url": "http://127.0.0.1:9/v1"}},
        "models": {"chat": [{"upstream": "local", "model": "m"}]},
        "tenants": {"acme": {}},
    }
    config = write_config(tmp_path / "plain.yaml", data)
    code, out, err = run(capsys, "keys", "create", "--store", "--config", str(config), "--tenant", "acme")
    assert code == 2 and out == "" and "live_keys" in err
    assert not (tmp_path / "tollgate-state.db").exists()
