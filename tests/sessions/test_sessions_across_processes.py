"""Session records and caps hold across real gateway processes sharing one store: two
gateways on one Redis, one gateway with two workers on one SQLite file, serving interleaved
turns of the same sessions; and a session's hard cap under 200 concurrent requests."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.state.redis import RedisStore
from adapters.state.sqlite import SQLiteStore
from gateway.keys import hash_key
from gateway.ports import StateStore
from gateway.stages.admit import scoped_session_key
from simulator import RunningSimulator
from tests.harness import free_port
from tests.metering.conftest import REDIS_URL
from tests.metering.processes import GatewayProcess, write_config
from tests.processes import process_timeout
from tests.servers import UPSTREAM_KEY

pytestmark = [pytest.mark.slow, process_timeout]

KEY = "tg-test-sessions-acme"
PRICE = {"input": 1000, "cached_input": 100, "output": 2000}  # dollars per million tokens
SESSIONS = 4
TURNS = 6


def config_data(sim: RunningSimulator, state: dict[str, Any], sessions: dict[str, Any]) -> dict[str, Any]:
    return {
        "server": {"access_log": False, "request_timeout_s": 10},
        "upstreams": {
            "local": {"kind": "openai_compat", "base_url": sim.openai_base_url(0), "api_key": UPSTREAM_KEY}
        },
        "models": {"chat": [{"upstream": "local", "model": "sim-model"}]},
        "tenants": {"acme": {"sessions": sessions}},
        "keys": [{"tenant": "acme", "hash": hash_key(KEY)}],
        "prices": {"sim-model": PRICE},
        "state": state,
    }


def cost_of(usage: dict[str, Any]) -> int:
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
    return (prompt - cached) * PRICE["input"] + cached * PRICE["cached_input"] + completion * PRICE["output"]


async def interleaved_turns(urls: list[str]) -> dict[str, list[dict[str, Any]]]:
    """SESSIONS conversations of TURNS turns each, every turn of every session at once, each
    turn sent to the next gateway in turn: the usage each turn was answered with, by session."""
    ids = [f"conv-{uuid.uuid4().hex}" for _ in range(SESSIONS)]
    histories: dict[str, list[Any]] = {s: [] for s in ids}
    usages: dict[str, list[dict[str, Any]]] = {s: [] for s in ids}
    gateways = itertools.cycle(urls)
    async with httpx.AsyncClient(timeout=60, headers={"authorization": f"Bearer {KEY}"}) as client:

        async def turn(session: str, url: str, n: int) -> None:
            histories[session].append({"role": "user", "content": f"turn {n} of {session}"})
            response = await client.post(
                url + "/v1/chat/completions",
                json={"model": "chat", "messages": histories[session], "max_tokens": 8},
                headers={"x-session-id": session},
            )
            assert response.status_code == 200, response.text
            body = response.json()
            histories[session].append(body["choices"][0]["message"])
            usages[session].append(body["usage"])

        for n in range(TURNS):
            await asyncio.gather(*(turn(s, next(gateways), n) for s in ids))
    return usages


async def check_exact(store: StateStore, usages: dict[str, list[dict[str, Any]]]) -> None:
    for session, turns in usages.items():
        record = None
        for _ in range(200):  # the last settles land just after their responses
            record = await store.session("acme", scoped_session_key("acme", session))
            if record is not None and record.turns == TURNS:
                break
            await asyncio.sleep(0.05)
        assert record is not None
        assert record.turns == TURNS
        assert record.input_tokens == sum(u["prompt_tokens"] for u in turns)
        assert record.output_tokens == sum(u["completion_tokens"] for u in turns)
        assert record.cached_tokens == sum(
            (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0 for u in turns
        )
        assert record.cost_micros == sum(cost_of(u) for u in turns)
        assert record.last_input == turns[-1]["prompt_tokens"]
        assert len(record.decision_ids) == 0  # no policy configured: no decisions


async def test_two_gateways_on_one_redis_count_interleaved_turns_exactly(
    tmp_path: Path, upstream_sim: RunningSimulator, redis_prefix: str
) -> None:
    state = {"store": "redis", "redis_url": REDIS_URL, "key_prefix": redis_prefix}
    config = write_config(tmp_path / "gw.yaml", config_data(upstream_sim, state, {}))
    gateways: list[GatewayProcess] = []
    store = RedisStore(REDIS_URL, redis_prefix)
    try:
        for i in range(2):
            gateways.append(GatewayProcess(config, free_port(), 1, tmp_path / f"gw{i}.log"))
        usages = await interleaved_turns([g.url for g in gateways])
        await check_exact(store, usages)
    finally:
        for gateway in gateways:
            gateway.stop()
        await store.aclose()


async def test_two_workers_on_one_sqlite_file_count_interleaved_turns_exactly(
    tmp_path: Path, upstream_sim: RunningSimulator
) -> None:
    state = {"store": "sqlite", "sqlite_path": str(tmp_path / "state.db")}
    config = write_config(tmp_path / "gw.yaml", config_data(upstream_sim, state, {}))
    gateway = GatewayProcess(config, free_port(), 2, tmp_path / "gw.log")
    store = SQLiteStore(tmp_path / "state.db")
    try:
        usages = await interleaved_turns([gateway.url])
        await check_exact(store, usages)
    finally:
        gateway.stop()
        await store.aclose()


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
async def test_a_session_under_200_concurrent_requests_never_passes_its_hard_cap(
    tmp_path: Path, upstream_sim: RunningSimulator, redis_prefix: str, backend: str
) -> None:
    cap_tokens, cap_usd = 1_500, 2.0  # room for some tens of requests of about 30 tokens, $0.04 each
    limits = {"limits": {"max_tokens": cap_tokens, "max_usd": cap_usd}}
    if backend == "redis":
        state: dict[str, Any] = {"store": "redis", "redis_url": REDIS_URL, "key_prefix": redis_prefix}
        store: StateStore = RedisStore(REDIS_URL, redis_prefix)
    else:
        state = {"store": "sqlite", "sqlite_path": str(tmp_path / "state.db")}
        store = SQLiteStore(tmp_path / "state.db")
    config = write_config(tmp_path / "gw.yaml", config_data(upstream_sim, state, limits))
    gateways: list[GatewayProcess] = []
    session = f"burst-{uuid.uuid4().hex}"
    body = {"model": "chat", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}
    try:
        for i in range(2):
            gateways.append(GatewayProcess(config, free_port(), 1, tmp_path / f"gw{i}.log"))
        limits_ = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        headers = {"authorization": f"Bearer {KEY}", "x-session-id": session}
        async with httpx.AsyncClient(timeout=60, limits=limits_, headers=headers) as client:
            targets = itertools.islice(itertools.cycle([g.url for g in gateways]), 200)
            responses = await asyncio.gather(
                *(client.post(url + "/v1/chat/completions", json=body) for url in targets)
            )
        admitted = [r for r in responses if r.status_code == 200]
        refused = [r for r in responses if r.status_code == 429]
        assert len(admitted) + len(refused) == 200, {r.status_code for r in responses}
        assert {r.json()["error"]["code"] for r in refused} == {"session_budget_exceeded"}
        assert 10 <= len(admitted) < 200
        tokens = sum(r.json()["usage"]["total_tokens"] for r in admitted)
        spend = sum(cost_of(r.json()["usage"]) for r in admitted)
        assert tokens <= cap_tokens
        assert spend <= cap_usd * 1e6
        key = scoped_session_key("acme", session)
        for _ in range(200):
            record = await store.session("acme", key)
            if record is not None and record.turns == len(admitted):
                break
            await asyncio.sleep(0.05)
        assert record is not None
        assert record.turns == len(admitted)
        assert record.input_tokens + record.output_tokens == tokens
        assert await store.counters("acme", (f"s.{key}:tok", f"s.{key}:usd")) == (tokens, spend)
    finally:
        for gateway in gateways:
            gateway.stop()
        await store.aclose()
