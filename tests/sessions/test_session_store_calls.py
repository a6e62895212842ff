"""What a session request costs the store when its tenant is busy enough to be leased: its
record's update rides in the lease's settle batch, so it makes no store call of its own. A
gateway process on a redis-server of the test's own, whose `INFO commandstats` counts every
call the gateway made (nothing else uses that server)."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from adapters.state.redis import RedisStore
from gateway.keys import hash_key
from gateway.stages.admit import scoped_session_key
from simulator import RunningSimulator
from tests.harness import free_port
from tests.metering.processes import GatewayProcess, RedisProcess, write_config
from tests.processes import process_timeout
from tests.servers import UPSTREAM_KEY

pytestmark = [pytest.mark.slow, process_timeout]

KEY = "tg-test-session-calls"
SESSIONS = 16
CONCURRENCY = 32
WARM = 400  # requests that make the tenant busy (its lease taken) and read each record once
MEASURED = 800


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    process = RedisProcess(tmp_path, None, "--appendonly", "no")
    try:
        yield process
    finally:
        process.kill()


def config_data(sim: RunningSimulator, redis_url: str) -> dict[str, Any]:
    return {
        "server": {"access_log": False, "request_timeout_s": 10},
        "upstreams": {
            "local": {"kind": "openai_compat", "base_url": sim.openai_base_url(0), "api_key": UPSTREAM_KEY}
        },
        "models": {"chat": [{"upstream": "local", "model": "sim-model"}]},
        # A hard budget far away: every request is metered, and a busy tenant is leased.
        "tenants": {"acme": {"budgets": [{"window": "day", "usd": 1_000_000, "kind": "hard"}]}},
        "keys": [{"tenant": "acme", "hash": hash_key(KEY)}],
        "prices": {"sim-model": {"input": 1, "cached_input": 0.1, "output": 2}},
        "state": {"store": "redis", "redis_url": redis_url, "key_prefix": "tgcalls"},
        # Records read once stay cached through the run: what is left is the per-request cost.
        "sessions": {"cache_s": 60},
    }


async def send(url: str, sessions: list[str], n: int) -> list[int]:
    """n requests, CONCURRENCY at a time, round-robin over the sessions; their statuses."""
    counter = itertools.count()
    statuses: list[int] = []
    headers = {"authorization": f"Bearer {KEY}"}
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(timeout=30, limits=limits, headers=headers) as client:

        async def worker() -> None:
            while (i := next(counter)) < n:
                session = sessions[i % len(sessions)]
                response = await client.post(
                    url + "/v1/chat/completions",
                    json={
                        "model": "chat",
                        "messages": [{"role": "user", "content": f"turn {i}"}],
                        "max_tokens": 8,
                    },
                    headers={"x-session-id": session},
                )
                statuses.append(response.status_code)

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return statuses


def store_calls(client: redis.Redis) -> int:
    """The store operations the gateway made since the last reset. Each operation of the Redis
    store on the request path is one script (EVALSHA, or EVAL when the script is not loaded);
    the commands a script runs inside are counted by Redis under their own names, and are
    not calls. Pings are counted too."""
    stats = client.info("commandstats")
    top_level = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_evalsha_ro", "cmdstat_eval_ro", "cmdstat_ping")
    return sum(int(stats[name]["calls"]) for name in top_level if name in stats)


async def test_a_leased_session_request_makes_no_store_call_of_its_own(
    tmp_path: Path, upstream_sim: RunningSimulator, private_redis: RedisProcess
) -> None:
    config = write_config(tmp_path / "gw.yaml", config_data(upstream_sim, private_redis.url))
    client = redis.Redis.from_url(private_redis.url)
    store = RedisStore(private_redis.url, "tgcalls")
    gateway = GatewayProcess(config, free_port(), 1, tmp_path / "gw.log")
    sessions = [f"agent-{uuid.uuid4().hex}" for _ in range(SESSIONS)]
    try:
        assert set(await send(gateway.url, sessions, WARM)) == {200}
        client.config_resetstat()
        assert set(await send(gateway.url, sessions, MEASURED)) == {200}
        # SIGTERM gives the lease back with its last batch: then every call the measured
        # requests caused has been made.
        gateway.stop()
        calls = store_calls(client)
        records = [await store.session("acme", scoped_session_key("acme", s)) for s in sessions]
        assert sum(r.turns for r in records if r is not None) == WARM + MEASURED  # each turn, once
        # Without the updates in the batches each request made one call of its own; with them,
        # the lease's calls (one per 25-50 ms while busy) are all there is.
        assert calls < MEASURED / 4, f"{calls} store calls for {MEASURED} session requests"
    finally:
        gateway.stop()
        await store.aclose()
        client.close()
