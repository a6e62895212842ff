"""A gateway with async jobs on, in-process, in front of a simulator of the test's own."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from gateway.config import GatewayConfig
from gateway.keys import hash_key
from simulator import RunningSimulator
from tests.servers import OTHER_TENANT_KEY, TEST_KEY, UPSTREAM_KEY, gateway_config

# Per token: 1,000 micro-dollars in, 100 cached, 2,000 out.
SIM_PRICE = {"input": 1000, "cached_input": 100, "output": 2000}
ADMIN_TOKEN = "tg-admin-jobs-token"

FAST_JOBS = {
    "idle_poll_s": 0.05,
    "retry_base_s": 0.05,
    "retry_max_s": 0.2,
    "native_poll_s": 0.05,
    "native_poll_max_s": 0.1,
    "throttle_pause_s": 0.05,
    "visibility_s": 5,
}


def jobs_config(sim: RunningSimulator, tmp: Path, **overrides: Any) -> GatewayConfig:
    jobs = {"sqlite_path": str(tmp / "jobs.db"), **FAST_JOBS, **overrides.pop("jobs", {})}
    settings: dict[str, Any] = {
        "upstreams": {
            "local": {
                "kind": "openai_compat",
                "base_url": sim.openai_base_url(0),
                "api_key": UPSTREAM_KEY,
                "retries": 0,
            },
            "workers": {
                "kind": "workers_ai",
                "account_id": "acct",
                "api_token": UPSTREAM_KEY,
                "api": "native",
                "base_url": sim.workers_ai_base_url,
                "retries": 0,
                "async_queue_models": ["@cf/moonshotai/kimi-k2.6"],
            },
            "workers-sync": {
                "kind": "workers_ai",
                "account_id": "acct",
                "api_token": UPSTREAM_KEY,
                "base_url": sim.workers_ai_base_url,
                "retries": 0,
            },
        },
        "models": {
            "chat": [{"upstream": "local", "model": "sim-model"}],
            "kimi": [{"upstream": "workers", "model": "@cf/moonshotai/kimi-k2.6"}],
            "kimi-sync": [{"upstream": "workers-sync", "model": "@cf/moonshotai/kimi-k2.6"}],
            "embed": [{"upstream": "local", "model": "sim-embed"}],
        },
        "prices": {"sim-model": SIM_PRICE, "@cf/moonshotai/kimi-k2.6": SIM_PRICE, "sim-embed": SIM_PRICE},
        "state": {"store": "sqlite", "sqlite_path": str(tmp / "state.db")},
        "admin": {"tokens": [hash_key(ADMIN_TOKEN)]},
        "jobs": jobs,
    }
    settings.update(overrides)
    return gateway_config(settings.pop("upstreams"), settings.pop("models"), **settings)


def auth(key: str = TEST_KEY) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


OTHER = auth(OTHER_TENANT_KEY)


def poll_job(
    http: httpx.Client, location: str, headers: dict[str, str], seconds: float = 60
) -> httpx.Response:
    """GET the job until it is no longer pending (202)."""
    deadline = time.monotonic() + seconds
    while True:
        response = http.get(location, headers=headers)
        if response.status_code != 202:
            return response
        assert time.monotonic() < deadline, f"the job did not finish: {response.text}"
        time.sleep(0.05)


def spend_micros(http: httpx.Client, tenant: str) -> int:
    response = http.get(f"/admin/spend?tenant={tenant}", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert response.status_code == 200, response.text
    return sum(row["cost_micros"] for row in _rows(response.json()))


def _rows(document: Any) -> list[dict[str, Any]]:
    """Every ledger row in the admin document, wherever it nests them."""
    if isinstance(document, dict):
        if "cost_micros" in document and "model" in document:
            return [document]
        return [row for value in document.values() for row in _rows(value)]
    if isinstance(document, list):
        return [row for value in document for row in _rows(value)]
    return []
