"""Active health probes: they open a dead replica's circuit before any request fails on it,
let it back in when it answers again, and stop with the application."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gateway.ports import ChunkStream, Health, UpstreamRequest, UpstreamResponse
from gateway.routing.circuit import BreakerSettings, CircuitState
from gateway.routing.pool import PoolSettings, ReplicaPool
from gateway.routing.probes import HealthProber, ProbeTarget
from simulator import RunningSimulator
from tests.harness import HELLO, eventually, openai_upstream, recorded
from tests.routing.conftest import REPLICAS
from tests.servers import TEST_KEY, RunningGateway, gateway_config, running_gateway


class ScriptedHealth:
    """An Upstream whose health checks answer from a list, and which counts them."""

    name = "scripted"
    provider = "openai"
    address = "scripted:1"

    def __init__(self, healthy: list[Health]) -> None:
        self.healthy = healthy
        self.replicas = tuple(f"http://replica-{i}/v1" for i in range(len(healthy)))
        self.checks = 0

    async def complete(self, request: UpstreamRequest) -> UpstreamResponse:
        raise NotImplementedError

    async def stream(self, request: UpstreamRequest) -> ChunkStream:
        raise NotImplementedError

    async def check_health(self, replica: int, timeout_s: float) -> Health:
        self.checks += 1
        return self.healthy[replica]

    async def aclose(self) -> None:
        pass


async def test_a_probe_feeds_every_replicas_circuit() -> None:
    upstream = ScriptedHealth([Health.UP, Health.UNREACHABLE, Health.UP])
    pool = ReplicaPool(upstream.replicas, PoolSettings(breaker=BreakerSettings(probe_failures=1)))
    await HealthProber([]).probe(ProbeTarget(upstream, pool, 1.0))
    assert [s.circuit for s in pool.status()] == [CircuitState.CLOSED, CircuitState.OPEN, CircuitState.CLOSED]
    upstream.healthy[1] = Health.UP
    await HealthProber([]).probe(ProbeTarget(upstream, pool, 1.0))
    assert pool.status()[1].circuit is CircuitState.HALF_OPEN


async def test_the_prober_runs_until_closed() -> None:
    upstream = ScriptedHealth([Health.UP, Health.UP])
    prober = HealthProber([ProbeTarget(upstream, ReplicaPool(upstream.replicas), 0.01)])
    prober.start()
    while upstream.checks < 6:
        await asyncio.sleep(0.01)
    await prober.aclose()
    stopped_at = upstream.checks
    await asyncio.sleep(0.05)
    assert upstream.checks == stopped_at


async def test_targets_without_an_interval_are_not_probed() -> None:
    upstream = ScriptedHealth([Health.UP])
    prober = HealthProber([ProbeTarget(upstream, ReplicaPool(upstream.replicas), 0)])
    prober.start()
    await asyncio.sleep(0.02)
    await prober.aclose()
    assert upstream.checks == 0


@pytest.fixture(scope="module")
def probed(pool_sim: RunningSimulator) -> Iterator[RunningGateway]:
    upstream: dict[str, Any] = openai_upstream(
        pool_sim.openai_base_url(0),
        retries=0,  # a request that meets the dead replica fails: only probes can steer around it
        health={"failure_threshold": 1000, "probe_interval_s": 0.05},
    )
    del upstream["base_url"]
    upstream["replicas"] = [pool_sim.openai_base_url(i) for i in range(REPLICAS)]
    config = gateway_config(
        upstreams={"pool": upstream}, models={"pool": [{"upstream": "pool", "model": "m"}]}
    )
    with running_gateway(config) as running:
        yield running


def test_probes_steer_sessions_around_a_dead_replica_and_back(
    probed: RunningGateway, sim: RunningSimulator
) -> None:
    session = f"session-{uuid.uuid4().hex}"
    with openai.OpenAI(base_url=probed.base_url, api_key=TEST_KEY, max_retries=0) as client:

        def landed() -> int | None:
            request_id = f"test-{uuid.uuid4().hex}"
            try:
                client.chat.completions.create(
                    model="pool",
                    messages=HELLO,
                    extra_headers={"x-request-id": request_id, "x-session-id": session},
                )
            except openai.APIError:
                return None
            [served] = recorded(sim, request_id)
            return served.replica

        home = landed()
        assert home is not None
        sim.faults.down(home)
        assert eventually(lambda: landed() not in (None, home))
        elsewhere = landed()
        assert [landed() for _ in range(5)] == [elsewhere] * 5
        sim.faults.up(home)
        assert eventually(lambda: landed() == home)
