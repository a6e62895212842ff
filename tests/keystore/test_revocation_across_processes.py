"""A revoked key is refused everywhere within a second: by another gateway process sharing
Redis, and by every worker of a gateway on one SQLite file when the revocation comes from
another process (`tollgate keys revoke`)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from adapters.state.sqlite_keys import SQLiteKeyStore
from gateway.keys import hash_key
from simulator import RunningSimulator
from tests.harness import free_port, openai_upstream
from tests.metering.conftest import REDIS_URL
from tests.metering.processes import GatewayProcess, write_config
from tests.processes import ROOT, process_timeout

pytestmark = [pytest.mark.slow, process_timeout]

ADMIN_TOKEN = "tg-admin-operator-token-across"
ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}
CHAT = {"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hello"}]}
WITHIN_S = 1.0
WORKERS = 2


def config_data(sim: RunningSimulator, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "server": {"access_log": False},
        "upstreams": {"local": openai_upstream(sim.openai_base_url(0))},
        "models": {"chat": [{"upstream": "local", "model": "sim-model"}]},
        "tenants": {"acme": {}},
        "state": state,
        "live_keys": {},
        "admin": {"tokens": [hash_key(ADMIN_TOKEN)]},
    }


def status(url: str, key: str) -> int:
    # A new connection each time, so that the requests spread over a gateway's workers.
    with httpx.Client(timeout=10) as client:
        response = client.post(
            url + "/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer {key}"}
        )
    return response.status_code


def first_refusal(url: str, key: str, seconds: float) -> float | None:
    """Seconds until a request with `key` is refused (401), polling; None past `seconds`."""
    started = time.monotonic()
    while time.monotonic() - started <= seconds:
        code = status(url, key)
        if code == 401:
            return time.monotonic() - started
        assert code == 200
    return None


def accepted_everywhere(urls: list[str], key: str, seconds: float = 10.0) -> bool:
    """A new key works at every URL, ten times in a row at each (within `seconds`)."""
    deadline = time.monotonic() + seconds
    streak = 0
    while streak < 10 * len(urls):
        if time.monotonic() > deadline:
            return False
        streak = streak + 1 if all(status(url, key) == 200 for url in urls) else 0
    return True


async def store_version(path: Path) -> int:
    store = SQLiteKeyStore(path)
    try:
        return await store.version()
    finally:
        await store.aclose()


def workers_at(log: Path, version: int) -> set[int]:
    """The worker processes that logged reading the live keys at `version` or later."""
    pids = set()
    for line in log.read_bytes().splitlines():
        if line.startswith(b"{"):
            entry = orjson.loads(line)
            if entry.get("msg") == "live keys read" and entry["version"] >= version:
                pids.add(entry["pid"])
    return pids


def test_a_key_revoked_on_one_gateway_is_refused_by_another_sharing_redis(
    tmp_path: Path, upstream_sim: RunningSimulator, redis_prefix: str
) -> None:
    state = {"store": "redis", "redis_url": REDIS_URL, "key_prefix": redis_prefix}
    config = write_config(tmp_path / "gw.yaml", config_data(upstream_sim, state))
    gateways: list[GatewayProcess] = []
    try:
        for name in ("a", "b"):
            gateways.append(GatewayProcess(config, free_port(), 1, tmp_path / f"gw-{name}.log"))
        a, b = gateways
        made = httpx.post(a.url + "/admin/keys", json={"tenant": "acme"}, headers=ADMIN).json()
        assert accepted_everywhere([a.url, b.url], made["key"])
        revoked = httpx.delete(a.url + f"/admin/keys/{made['id']}", headers=ADMIN)
        assert revoked.status_code == 200
        assert first_refusal(b.url, made["key"], WITHIN_S) is not None
        assert {status(url, made["key"]) for url in (a.url, b.url) for _ in range(5)} == {401}
    finally:
        for gateway in gateways:
            gateway.stop()


def test_a_key_revoked_from_the_command_line_is_refused_by_every_sqlite_worker(
    tmp_path: Path, upstream_sim: RunningSimulator
) -> None:
    state = {"store": "sqlite", "sqlite_path": str(tmp_path / "state.db")}
    config = write_config(tmp_path / "gw.yaml", config_data(upstream_sim, state))
    gateway = GatewayProcess(config, free_port(), WORKERS, tmp_path / "gw.log")
    try:
        made = httpx.post(gateway.url + "/admin/keys", json={"tenant": "acme"}, headers=ADMIN).json()
        assert accepted_everywhere([gateway.url], made["key"])
        revoke = [sys.executable, "-m", "gateway.cli", "keys", "revoke", made["id"], "--config", str(config)]
        subprocess.run(revoke, cwd=ROOT, check=True, capture_output=True, timeout=120)
        revoked_at = time.monotonic()
        version = asyncio.run(store_version(tmp_path / "state.db"))
        assert first_refusal(gateway.url, made["key"], WITHIN_S) is not None
        # Each worker says when it read the revocation: both did, within the second.
        while len(workers_at(gateway.log, version)) < WORKERS:
            assert time.monotonic() - revoked_at <= WITHIN_S, workers_at(gateway.log, version)
            time.sleep(0.01)
        assert {status(gateway.url, made["key"]) for _ in range(10)} == {401}
    finally:
        gateway.stop()
