"""A simulator with four replicas (each its own prefix cache) shared by the routing tests,
and gateways in front of it configured per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from simulator import RunningSimulator, SimConfig, Simulator
from tests.servers import UPSTREAM_KEY

REPLICAS = 4


@pytest.fixture(scope="session")
def pool_sim() -> Iterator[RunningSimulator]:
    sim = Simulator.start_in_thread(
        SimConfig(replicas=REPLICAS, api_key=UPSTREAM_KEY, cache_blocks=200_000, default_reply_tokens=4)
    )
    yield sim
    sim.stop()


@pytest.fixture
def sim(pool_sim: RunningSimulator) -> Iterator[RunningSimulator]:
    """The shared pool simulator with no planned fault and every replica up."""
    pool_sim.faults.clear()
    yield pool_sim
    pool_sim.faults.clear()
