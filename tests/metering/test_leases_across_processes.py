"""Leases with real gateway processes on one Redis: a busy tenant near the end of its budget
never passes it while the slices shrink to exact reservations; the slice of a gateway
killed with SIGKILL is held until its lease ends, then released, and the budget is exact."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from adapters.state.redis import RedisStore
from gateway.keys import hash_key
from gateway.metering.records import Settlement
from simulator import RunningSimulator
from tests.harness import free_port
from tests.metering.conftest import REDIS_URL
from tests.metering.processes import GatewayProcess, write_config
from tests.metering.test_budgets_across_processes import BODY, KEY, PRICE, cost_of, counter, wait_settled
from tests.processes import process_timeout
from tests.servers import UPSTREAM_KEY

pytestmark = [pytest.mark.slow, process_timeout, pytest.mark.usefixtures("one_budget_day")]

BUDGET_MICROS = 2_000_000_000  # $2,000 a day: some 48,000 requests of about 41,000 each


def config_data(sim: RunningSimulator, paced: RunningSimulator, prefix: str) -> dict[str, Any]:
    return {
        "server": {"access_log": False, "request_timeout_s": 3},
        "upstreams": {
            "local": {"kind": "openai_compat", "base_url": sim.openai_base_url(0), "api_key": UPSTREAM_KEY},
            "paced": {"kind": "openai_compat", "base_url": paced.openai_base_url(0), "api_key": UPSTREAM_KEY},
        },
        "models": {
            "chat": [{"upstream": "local", "model": "sim-model"}],
            "paced": [{"upstream": "paced", "model": "sim-model"}],
        },
        "tenants": {"acme": {"budgets": [{"window": "day", "usd": BUDGET_MICROS / 1e6, "kind": "hard"}]}},
        "keys": [{"tenant": "acme", "hash": hash_key(KEY)}],
        "prices": {"sim-model": PRICE},
        "state": {"store": "redis", "redis_url": REDIS_URL, "key_prefix": prefix, "lease_s": 1},
    }


async def clients(urls: list[str], concurrency: int, stop_after: int | None = None) -> list[httpx.Response]:
    """`concurrency` clients, each sending one request after another (spread over the
    gateways) until it is refused, or until `stop_after` requests were sent in all."""
    responses: list[httpx.Response] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"authorization": f"Bearer {KEY}"}

    async def one(client: httpx.AsyncClient, index: int) -> None:
        n = index
        while stop_after is None or len(responses) < stop_after:
            response = await client.post(urls[n % len(urls)] + "/v1/chat/completions", json=BODY)
            responses.append(response)
            n += 1
            if response.status_code != 200:
                return

    async with httpx.AsyncClient(limits=limits, timeout=60, headers=headers) as client:
        await asyncio.gather(*(one(client, i) for i in range(concurrency)))
    return responses


async def in_flight(url: str, n: int) -> list[httpx.Response | BaseException]:
    headers = {"authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(timeout=30, headers=headers) as client:
        body = {**BODY, "model": "paced"}
        return await asyncio.gather(
            *(client.post(url + "/v1/chat/completions", json=body) for _ in range(n)), return_exceptions=True
        )


def lease_records(prefix: str) -> dict[str, bytes | None]:
    """Each lease record of acme in Redis (open or given back) and its state."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:{{acme}}:r:l*", count=1000))
        return {key.decode(): client.hget(key, "s") for key in keys}
    finally:
        client.close()


async def spend_now(store: RedisStore, fixed: int) -> None:
    """Spend `fixed` on acme's budget today, as a settled request would."""
    day = datetime.now(UTC).date()
    expires = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()) + 3 * 86_400
    await store.settle(Settlement("acme", uuid.uuid4().hex, ((counter(), fixed, expires),), (), None, 600))


async def test_a_tenant_at_99_percent_never_passes_its_budget_while_slices_shrink(
    tmp_path: Path, upstream_sim: RunningSimulator, paced_sim: RunningSimulator, redis_prefix: str
) -> None:
    config = write_config(tmp_path / "gw.yaml", config_data(upstream_sim, paced_sim, redis_prefix))
    store = RedisStore(REDIS_URL, redis_prefix)
    gateways: list[GatewayProcess] = []
    try:
        already = BUDGET_MICROS * 99 // 100
        await spend_now(store, already)
        for i in range(2):
            gateways.append(GatewayProcess(config, free_port(), 1, tmp_path / f"gw{i}.log"))
        responses = await clients([g.url for g in gateways], 200)
        admitted = [r for r in responses if r.status_code == 200]
        refused = [r for r in responses if r.status_code != 200]
        assert {r.status_code for r in refused} == {429}
        assert {r.json()["error"]["code"] for r in refused} == {"insufficient_quota"}
        # The 1 % left ($20) covers about 480 of these requests: most of it was used.
        assert len(admitted) >= 300
        await wait_settled(store, seconds=30)  # every slice given back, every batch applied
        [spent] = await store.counters("acme", (counter(),))
        assert spent <= BUDGET_MICROS
        assert spent == already + sum(cost_of(r.json()["usage"]) for r in admitted)
        today = datetime.now(UTC).date().isoformat()
        rows = await store.spend(("acme",), today, today)
        assert sum(r.requests for r in rows) == len(admitted)
        # Slices were taken, and all of them given back.
        records = lease_records(redis_prefix)
        assert records
        assert set(records.values()) == {b"s"}
    finally:
        for gateway in gateways:
            gateway.stop()
        await store.aclose()


async def test_the_slice_of_a_killed_gateway_is_released_when_its_lease_ends(
    tmp_path: Path, upstream_sim: RunningSimulator, paced_sim: RunningSimulator, redis_prefix: str
) -> None:
    config = write_config(tmp_path / "gw.yaml", config_data(upstream_sim, paced_sim, redis_prefix))
    store = RedisStore(REDIS_URL, redis_prefix)
    port = free_port()
    gateway = GatewayProcess(config, port, 1, tmp_path / "gw.log")
    try:
        fast = await clients([gateway.url], 50, stop_after=400)
        assert {r.status_code for r in fast} == {200}
        spent_fast = sum(cost_of(r.json()["usage"]) for r in fast)
        # Requests still running (50 ms a token) keep the lease in use while the last batch goes.
        paced = asyncio.ensure_future(in_flight(gateway.url, 5))
        today = datetime.now(UTC).date().isoformat()
        for _ in range(200):
            rows = await store.spend(("acme",), today, today)
            if sum(r.requests for r in rows) == len(fast):
                break
            await asyncio.sleep(0.02)
        assert sum(r.requests for r in rows) == len(fast)  # every batch applied
        assert b"o" in lease_records(redis_prefix).values()  # a slice is held
        gateway.kill()
        outcomes = await paced
        assert not any(isinstance(o, httpx.Response) and o.status_code == 200 for o in outcomes)
        [held] = await store.counters("acme", (counter(),))
        assert held > spent_fast  # the dead gateway's slice (and reservations) still held
        await wait_settled(store, seconds=30)  # until its lease ends (3 s + 1 s + 2 s)
        [after] = await store.counters("acme", (counter(),))
        assert after == spent_fast
        # The budget goes on from there, exactly.
        gateway = GatewayProcess(config, port, 1, tmp_path / "gw-restarted.log")
        more = await clients([gateway.url], 50, stop_after=300)
        assert {r.status_code for r in more} == {200}
        await wait_settled(store, seconds=30)
        [spent] = await store.counters("acme", (counter(),))
        assert spent == spent_fast + sum(cost_of(r.json()["usage"]) for r in more)
    finally:
        gateway.stop()
        await store.aclose()
