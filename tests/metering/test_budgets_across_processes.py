"""Hard budgets hold across real gateway processes sharing one store: four gateways on one
Redis, one gateway with four workers on one SQLite file; spend survives a restart; a Redis
that dies is failed closed, then recovered from."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.state.redis import RedisStore
from adapters.state.sqlite import SQLiteStore
from gateway.keys import hash_key
from gateway.ports import StateStore
from simulator import RunningSimulator
from tests.harness import free_port
from tests.metering.conftest import REDIS_URL
from tests.metering.processes import GatewayProcess, RedisProcess, write_config
from tests.processes import process_timeout
from tests.servers import UPSTREAM_KEY

pytestmark = [pytest.mark.slow, process_timeout, pytest.mark.usefixtures("one_budget_day")]

KEY = "tg-test-budget-acme"
LENIENT_KEY = "tg-test-budget-lenient"
BUDGET_MICROS = 2_000_000  # $2 a day
# Micro-dollars per token: 1,000 in, 100 cached, 2,000 out. A `hello` with max_tokens 16
# reserves 12 x 1,000 + 16 x 2,000 = 44,000 and costs about 41,000: some 48 fit in the budget.
PRICE = {"input": 1000, "cached_input": 100, "output": 2000}
BODY = {"model": "chat", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]}


def config_data(sim: RunningSimulator, paced: RunningSimulator, state: dict[str, Any]) -> dict[str, Any]:
    budget = [{"window": "day", "usd": BUDGET_MICROS / 1e6, "kind": "hard"}]
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
        "tenants": {"acme": {"budgets": budget}, "lenient": {"budgets": budget}},
        "keys": [
            {"tenant": "acme", "hash": hash_key(KEY)},
            {"tenant": "lenient", "hash": hash_key(LENIENT_KEY)},
        ],
        "prices": {"sim-model": PRICE},
        "state": {"lease_s": 1, **state},
    }


def counter() -> str:
    return f"t:day:{datetime.now(UTC).date().isoformat()}:usd"


def cost_of(usage: dict[str, Any]) -> int:
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
    return (prompt - cached) * PRICE["input"] + cached * PRICE["cached_input"] + completion * PRICE["output"]


async def fire(urls: list[str], n: int, key: str = KEY, body: dict[str, Any] = BODY) -> list[httpx.Response]:
    """n requests at once, spread over the gateways."""
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(limits=limits, timeout=60, headers=headers) as client:
        targets = itertools.islice(itertools.cycle(urls), n)
        return await asyncio.gather(
            *(client.post(url + "/v1/chat/completions", json=body) for url in targets)
        )


async def wait_settled(store: StateStore, tenant: str = "acme", seconds: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while await store.open_reservations(tenant):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("reservations still open: some admitted request was never settled")
        await asyncio.sleep(0.05)


async def check_budget_held(responses: list[httpx.Response], store: StateStore) -> None:
    admitted = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code == 429]
    assert len(admitted) + len(refused) == len(responses), {r.status_code for r in responses}
    assert {r.json()["error"]["code"] for r in refused} == {"insufficient_quota"}
    assert 10 <= len(admitted) <= 60  # the budget let some through, and stopped the rest
    await wait_settled(store)  # every admitted request's reservation was settled, none expired
    [spent] = await store.counters("acme", (counter(),))
    assert spent <= BUDGET_MICROS
    # Each admitted request was billed exactly once, at its actual usage.
    assert spent == sum(cost_of(r.json()["usage"]) for r in admitted)
    today = datetime.now(UTC).date().isoformat()
    rows = await store.spend(("acme",), today, today)
    assert sum(r.requests for r in rows) == len(admitted)
    assert sum(r.cost_micros for r in rows) == spent


async def test_four_gateways_sharing_redis_never_pass_a_hard_budget(
    tmp_path: Path, upstream_sim: RunningSimulator, paced_sim: RunningSimulator, redis_prefix: str
) -> None:
    state = {"store": "redis", "redis_url": REDIS_URL, "key_prefix": redis_prefix}
    config = write_config(tmp_path / "gw.yaml", config_data(upstream_sim, paced_sim, state))
    gateways: list[GatewayProcess] = []
    store = RedisStore(REDIS_URL, redis_prefix)
    try:
        for i in range(4):
            gateways.append(GatewayProcess(config, free_port(), 1, tmp_path / f"gw{i}.log"))
        responses = await fire([g.url for g in gateways], 500)
        await check_budget_held(responses, store)
    finally:
        for gateway in gateways:
            gateway.stop()
        await store.aclose()


async def test_worker_processes_sharing_one_sqlite_file_never_pass_a_hard_budget(
    tmp_path: Path, upstream_sim: RunningSimulator, paced_sim: RunningSimulator
) -> None:
    state = {"store": "sqlite", "sqlite_path": str(tmp_path / "state.db")}
    config = write_config(tmp_path / "gw.yaml", config_data(upstream_sim, paced_sim, state))
    gateway = GatewayProcess(config, free_port(), 4, tmp_path / "gw.log")
    store = SQLiteStore(tmp_path / "state.db")
    try:
        responses = await fire([gateway.url], 500)
        await check_budget_held(responses, store)
    finally:
        gateway.stop()
        await store.aclose()


async def test_spend_and_open_reservations_survive_a_crash_and_restart(
    tmp_path: Path, upstream_sim: RunningSimulator, paced_sim: RunningSimulator
) -> None:
    state = {"store": "sqlite", "sqlite_path": str(tmp_path / "state.db")}
    config = write_config(tmp_path / "gw.yaml", config_data(upstream_sim, paced_sim, state))
    port = free_port()
    gateway = GatewayProcess(config, port, 2, tmp_path / "gw.log")
    store = SQLiteStore(tmp_path / "state.db")
    try:
        before = await fire([gateway.url], 10)
        assert {r.status_code for r in before} == {200}, [r.text for r in before if r.status_code != 200]
        await wait_settled(store)
        [settled] = await store.counters("acme", (counter(),))
        assert settled == sum(cost_of(r.json()["usage"]) for r in before)
        # Requests in flight (50 ms a token) when every worker is killed at once.
        in_flight = asyncio.ensure_future(fire([gateway.url], 5, body={**BODY, "model": "paced"}))
        for _ in range(1000):
            if await store.open_reservations("acme") or in_flight.done():
                break
            await asyncio.sleep(0.01)
        gateway.kill()
        # What the killed workers committed is in the file: the spend, and the reservations
        # of the requests they never finished, which hold budget until their leases end.
        [used] = await store.counters("acme", (counter(),))
        assert used > settled
        assert await store.open_reservations("acme") > 0
        await asyncio.gather(in_flight, return_exceptions=True)
        gateway = GatewayProcess(config, port, 2, tmp_path / "gw-restarted.log")
        await wait_settled(store)  # the orphans are released when their leases end (deadline 3 s + 1 s)
        [after_leases] = await store.counters("acme", (counter(),))
        assert after_leases == settled
        # The budget goes on from where it was: the rest of it, and no more.
        more = await fire([gateway.url], 200)
        await wait_settled(store)
        [spent] = await store.counters("acme", (counter(),))
        assert spent <= BUDGET_MICROS
        admitted = [r for r in more if r.status_code == 200]
        assert spent == settled + sum(cost_of(r.json()["usage"]) for r in admitted)
        assert any(r.status_code == 429 for r in more)
    finally:
        gateway.stop()
        await store.aclose()


async def test_a_redis_that_dies_is_failed_closed_then_recovered_from(
    tmp_path: Path, upstream_sim: RunningSimulator, paced_sim: RunningSimulator
) -> None:
    redis = RedisProcess(tmp_path)
    state = {"store": "redis", "redis_url": redis.url, "timeout_s": 0.5, "fail_open_tenants": ["lenient"]}
    config = write_config(tmp_path / "gw.yaml", config_data(upstream_sim, paced_sim, state))
    try:
        gateway = GatewayProcess(config, free_port(), 2, tmp_path / "gw.log")
    except BaseException:
        redis.kill()
        raise
    store = RedisStore(redis.url)
    try:
        first = await fire([gateway.url], 5)
        assert {r.status_code for r in first} == {200}
        await wait_settled(store)
        [spent] = await store.counters("acme", (counter(),))
        redis.kill()
        down = await fire([gateway.url], 5)
        assert {r.status_code for r in down} == {503}
        assert {r.json()["error"]["code"] for r in down} == {"state_store_unavailable"}
        lenient = await fire([gateway.url], 2, key=LENIENT_KEY)
        assert {r.status_code for r in lenient} == {200}  # configured to fail open
        redis = redis.restart()
        recovered = await fire([gateway.url], 5)
        assert {r.status_code for r in recovered} == {200}
        await wait_settled(store)
        [after] = await store.counters("acme", (counter(),))
        assert after == spent + sum(cost_of(r.json()["usage"]) for r in recovered)
    finally:
        gateway.stop()
        await store.aclose()
        redis.kill()
