"""Cohort scheduling (`gateway/cohorts.py`): under load, the requests woken together take each
phase together; alone, a request never yields; a finish cancelled at its yield still runs the
finishers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from gateway import cohorts
from gateway.exchange import Endpoint, Exchange
from gateway.forward import Forwarder
from gateway.pipeline import Pipeline


def _exchange(request_id: str) -> Exchange:
    return Exchange(request_id, Endpoint.CHAT, time.monotonic(), time.monotonic() + 30, {}, b"")


class _Stage:
    name = "recording"

    def __init__(self, log: list[tuple[str, str]]) -> None:
        self._log = log

    async def __call__(self, exchange: Exchange) -> None:
        self._log.append(("stage", exchange.request_id))


class _Finisher:
    name = "recording"

    def __init__(self, log: list[tuple[str, str]]) -> None:
        self._log = log

    async def finish(self, exchange: Exchange) -> None:
        self._log.append(("finished", exchange.request_id))


@pytest.fixture
def in_flight() -> Iterator[None]:
    """Two model calls counted in flight, as `GatewayASGI` counts them under load."""
    cohorts.entered()
    cohorts.entered()
    try:
        yield
    finally:
        cohorts.left()
        cohorts.left()


async def _prepared(pipeline: Pipeline, request_id: str, log: list[tuple[str, str]]) -> None:
    log.append(("arrived", request_id))
    await pipeline.prepare(_exchange(request_id))
    log.append(("prepared", request_id))


async def test_requests_woken_together_take_the_stages_together(in_flight: None) -> None:
    log: list[tuple[str, str]] = []
    pipeline = Pipeline((_Stage(log),), Forwarder({}), (), ())
    await asyncio.gather(_prepared(pipeline, "a", log), _prepared(pipeline, "b", log))
    assert log == [
        ("arrived", "a"),
        ("arrived", "b"),
        ("stage", "a"),
        ("prepared", "a"),
        ("stage", "b"),
        ("prepared", "b"),
    ]


async def test_a_request_alone_never_yields() -> None:
    log: list[tuple[str, str]] = []
    pipeline = Pipeline((_Stage(log),), Forwarder({}), (), ())
    cohorts.entered()
    try:
        await asyncio.gather(_prepared(pipeline, "a", log), _prepared(pipeline, "b", log))
    finally:
        cohorts.left()
    # One call in flight: each goes through its stages at once, as without cohorts
    assert log == [
        ("arrived", "a"),
        ("stage", "a"),
        ("prepared", "a"),
        ("arrived", "b"),
        ("stage", "b"),
        ("prepared", "b"),
    ]


async def test_together_yields_one_turn_only_under_load() -> None:
    ran: list[str] = []
    loop = asyncio.get_running_loop()
    loop.call_soon(ran.append, "alone")
    await cohorts.together()
    assert ran == []  # no turn taken: the callback scheduled before has not run
    await asyncio.sleep(0)
    cohorts.entered()
    cohorts.entered()
    try:
        loop.call_soon(ran.append, "loaded")
        await cohorts.together()
        assert ran == ["alone", "loaded"]
    finally:
        cohorts.left()
        cohorts.left()


async def test_a_finish_cancelled_at_its_yield_still_runs_the_finishers(in_flight: None) -> None:
    log: list[tuple[str, str]] = []
    pipeline = Pipeline((), Forwarder({}), (), (_Finisher(log),))
    task = asyncio.ensure_future(pipeline.finish(_exchange("a")))
    await asyncio.sleep(0)  # the task runs to its yield
    assert log == []
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log == [("finished", "a")]
