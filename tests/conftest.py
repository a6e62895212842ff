"""Real servers shared by the gateway and adapter tests: the upstream simulator and a gateway
in front of it, both on loopback for the whole session, and clients for the gateway."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import openai
import pytest

from gateway.build import stale_compiled
from simulator import RunningSimulator, SimConfig, Simulator
from tests.harness import free_port, openai_upstream, wait_before_day_end
from tests.servers import TEST_KEY, UPSTREAM_KEY, RunningGateway, gateway_config, running_gateway

MAX_BODY_BYTES = 16 * 1024
# Longer than any module that uses `one_budget_day` takes, on a slow machine.
BUDGET_DAY_MODULE_S = 300


def pytest_configure(config: pytest.Config) -> None:
    """Compiled modules built in place (scripts/compile.sh) shadow their sources: an edit made
    since would not be what the tests run."""
    stale = stale_compiled(Path(__file__).resolve().parent.parent)
    if stale:
        pytest.exit(
            f"compiled modules are older than their sources ({', '.join(stale[:5])}...): "
            "run scripts/compile.sh again, or scripts/compile.sh --clean for plain Python",
            returncode=4,
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test using `one_budget_day` may first wait out the UTC day (up to
    BUDGET_DAY_MODULE_S): its time limit (pytest-timeout's, which counts fixtures) covers that
    wait on top of the test's own. A test's own `timeout` mark still wins."""
    for item in items:
        if "one_budget_day" in getattr(item, "fixturenames", ()):
            limit = float(item.config.getini("timeout") or 0)
            if limit > 0:
                item.add_marker(pytest.mark.timeout(limit + BUDGET_DAY_MODULE_S))


@pytest.fixture(scope="module")
def one_budget_day() -> None:
    """The module's requests all fall in one UTC day. Budget windows (day, month) turn over at
    UTC midnight, so a module that checks one window's spend across requests, started just
    before it, waits for the new day rather than straddle it."""
    time.sleep(wait_before_day_end(datetime.now(UTC), BUDGET_DAY_MODULE_S))


@pytest.fixture(scope="session")
def upstream_sim() -> Iterator[RunningSimulator]:
    """Two replicas: replica 0 serves the preferred candidates, replica 1 the fallbacks."""
    sim = Simulator.start_in_thread(SimConfig(replicas=2, api_key=UPSTREAM_KEY))
    yield sim
    sim.stop()


@pytest.fixture(scope="session")
def paced_sim() -> Iterator[RunningSimulator]:
    """A simulator that takes 50 ms per generated token, for streams that are still running."""
    sim = Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY, decode_s_per_token=0.05))
    yield sim
    sim.stop()


@pytest.fixture
def upstream(upstream_sim: RunningSimulator) -> Iterator[RunningSimulator]:
    """The shared simulator with no planned fault, every replica up and no recorded request."""
    upstream_sim.faults.clear()
    upstream_sim.clear()
    yield upstream_sim
    upstream_sim.faults.clear()


@pytest.fixture(scope="session")
def gateway(upstream_sim: RunningSimulator, paced_sim: RunningSimulator) -> Iterator[RunningGateway]:
    sim = upstream_sim
    config = gateway_config(
        upstreams={
            "local": openai_upstream(sim.openai_base_url(0)),
            "backup": openai_upstream(sim.openai_base_url(1)),
            "dead": openai_upstream(f"http://127.0.0.1:{free_port()}/v1"),
            "impatient": openai_upstream(sim.openai_base_url(0), timeouts={"first_byte_s": 0.5}),
            "paced": openai_upstream(paced_sim.openai_base_url(0)),
            "misconfigured": {**openai_upstream(sim.openai_base_url(0)), "api_key": "not-the-upstream-key"},
            # Tests that make an upstream answer badly use this one, so the circuit they may open
            # is never the one other tests count on being closed.
            "faulty": openai_upstream(sim.openai_base_url(0)),
        },
        models={
            "chat": [{"upstream": "local", "model": "sim-model"}],
            "embed": [{"upstream": "local", "model": "@cf/baai/bge-large-en-v1.5"}],
            "failover": [
                {"upstream": "local", "model": "sim-model"},
                {"upstream": "backup", "model": "backup-model"},
            ],
            "dead": [{"upstream": "dead", "model": "sim-model"}],
            "dead-first": [
                {"upstream": "dead", "model": "sim-model"},
                {"upstream": "backup", "model": "backup-model"},
            ],
            "impatient": [{"upstream": "impatient", "model": "sim-model"}],
            "paced": [{"upstream": "paced", "model": "sim-model"}],
            "misconfigured": [{"upstream": "misconfigured", "model": "sim-model"}],
            "faulty": [{"upstream": "faulty", "model": "sim-model"}],
        },
        server={"max_body_bytes": MAX_BODY_BYTES},
    )
    with running_gateway(config) as running:
        yield running


@pytest.fixture
def request_id() -> str:
    """A fresh, well-formed x-request-id: the key to find a request in the simulator's records."""
    return f"test-{uuid.uuid4().hex}"


@pytest.fixture(scope="session")
def client(gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as oai:
        yield oai


@pytest.fixture
async def aclient(gateway: RunningGateway) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as oai:
        yield oai


@pytest.fixture(scope="session")
def http(gateway: RunningGateway) -> Iterator[httpx.Client]:
    """Raw HTTP to the gateway, authenticated as tenant alpha unless a test says otherwise."""
    headers = {"authorization": f"Bearer {TEST_KEY}"}
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=30) as raw:
        yield raw
