"""A gateway in front of the shared simulator, storing responses in a SQLite file of its own,
and clients of its three doors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from simulator import RunningSimulator, SimConfig, Simulator
from tests.harness import free_port, openai_upstream
from tests.servers import TEST_KEY, UPSTREAM_KEY, RunningGateway, gateway_config, running_gateway


def doors_config(
    sim: RunningSimulator, responses_db: Path, kimi: RunningSimulator | None = None, **overrides: Any
) -> Any:
    thinking = kimi or sim
    return gateway_config(
        upstreams={
            "local": openai_upstream(sim.openai_base_url(0)),
            "thinking": openai_upstream(thinking.openai_base_url(0)),
            "dead": openai_upstream(f"http://127.0.0.1:{free_port()}/v1"),
        },
        models={
            "chat": [{"upstream": "local", "model": "sim-model"}],
            "kimi": [{"upstream": "thinking", "model": "@cf/moonshotai/kimi-k2.6"}],
            "dead": [{"upstream": "dead", "model": "sim-model"}],
            "dead-first": [
                {"upstream": "dead", "model": "sim-model"},
                {"upstream": "local", "model": "sim-model"},
            ],
        },
        responses={"sqlite_path": str(responses_db), "retention_s": 3600, **overrides.pop("responses", {})},
        **overrides,
    )


@pytest.fixture(scope="module")
def responses_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("responses") / "responses.db"


@pytest.fixture(scope="module")
def kimi_sim() -> Iterator[RunningSimulator]:
    """A simulator with Kimi's profile: reasoning text before the answer."""
    sim = Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY, profiles=("kimi",)))
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def doors_gateway(
    upstream_sim: RunningSimulator, kimi_sim: RunningSimulator, responses_db: Path
) -> Iterator[RunningGateway]:
    with running_gateway(doors_config(upstream_sim, responses_db, kimi_sim)) as running:
        yield running


@pytest.fixture(scope="module")
def claude(doors_gateway: RunningGateway) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=doors_gateway.url, api_key=TEST_KEY, max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def oai(doors_gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=doors_gateway.base_url, api_key=TEST_KEY, max_retries=0) as client:
        yield client
