"""Fixtures: a real simulator on loopback, and clients for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest

from simulator import SimConfig, Simulator


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(SimConfig(replicas=2)) as simulator:
        yield simulator


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def oai(sim: Simulator) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(base_url=sim.openai_base_url(), api_key="unused", max_retries=0)
    yield client
    await client.close()
