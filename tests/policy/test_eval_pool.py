"""The evaluation threads: an evaluation that outlives its caller's timeout gives its thread
up to a fresh one, so it never starves the evaluations after it; the queue is bounded."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.policy.eval_pool import EvaluationPool
from adapters.policy.rego import RegoEngine
from gateway.errors import PolicyUnavailable
from tests.policy.conftest import policy_config

GENEROUS_S = 30.0

# Evaluating with input.work = n takes time growing with n squared (seconds at 4000).
SLOW_POLICY = """package gateway.authz

decision := {"allow": true, "reasons": []} if not input.work

decision := {"allow": count(busy) > 0, "reasons": []} if input.work

busy contains x if {
\tsome i in numbers.range(1, input.work)
\tx := sprintf("%d", [i])
}
"""


@pytest.fixture
async def pool() -> AsyncIterator[EvaluationPool]:
    pool = EvaluationPool(1, max_abandoned=1, max_waiting=2, name="test-eval")
    yield pool
    pool.close()


async def test_an_evaluation_that_timed_out_does_not_hold_the_next_one_up(pool: EvaluationPool) -> None:
    release = threading.Event()
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await pool.run(release.wait)
        # The only thread is still stuck in the first call; the next one runs in a fresh thread.
        async with asyncio.timeout(GENEROUS_S):
            assert await pool.run(lambda: "answered") == "answered"
        assert not release.is_set()
        stats = pool.stats()
        assert (stats.abandoned, stats.running, stats.waiting) == (1, 0, 0)
    finally:
        release.set()


async def test_an_abandoned_thread_that_finishes_is_taken_back_or_retired(pool: EvaluationPool) -> None:
    release = threading.Event()
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await pool.run(release.wait)
    finally:
        release.set()
    await _until(lambda: pool.stats().abandoned == 0)
    async with asyncio.timeout(GENEROUS_S):
        assert await pool.run(threading.get_ident) > 0


async def test_past_the_abandoned_limit_no_thread_is_added(pool: EvaluationPool) -> None:
    release = threading.Event()
    waits: list[float] = []
    pool.observe_waits(waits.append)
    try:
        for _ in range(2):  # the thread, then its one allowed replacement, both stuck
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await pool.run(release.wait)
        assert pool.stats().abandoned == 2
        with pytest.raises(TimeoutError):  # no third thread: the call waits for one
            async with asyncio.timeout(0.2):
                await pool.run(lambda: "never")
        assert pool.stats().waiting == 0  # the caller that gave up left the queue
        assert len(waits) == 3 and waits[2] > 0  # its wait is measured too
        release.set()
        async with asyncio.timeout(GENEROUS_S):  # a finished abandoned thread is taken back
            assert await pool.run(lambda: "answered") == "answered"
    finally:
        release.set()


async def test_a_full_queue_refuses_at_once(pool: EvaluationPool) -> None:
    release = threading.Event()
    running = asyncio.ensure_future(pool.run(release.wait))
    waiting = [asyncio.ensure_future(pool.run(lambda: "queued")) for _ in range(2)]
    try:
        await _until(lambda: pool.stats().waiting == 2)
        with pytest.raises(PolicyUnavailable, match="2 policy evaluations are already waiting"):
            await pool.run(lambda: "refused")
        assert pool.stats().refused == 1
        release.set()
        async with asyncio.timeout(GENEROUS_S):
            assert await asyncio.gather(running, *waiting) == [True, "queued", "queued"]
        assert pool.stats().started == 3
    finally:
        release.set()


async def test_an_exception_in_the_evaluation_reaches_the_caller(pool: EvaluationPool) -> None:
    def fails() -> None:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        await pool.run(fails)
    assert await pool.run(lambda: 1) == 1


async def test_a_slow_policy_evaluation_does_not_starve_the_engine(tmp_path: Path) -> None:
    (tmp_path / "authz.rego").write_text(SLOW_POLICY)
    engine = await RegoEngine.open(policy_config(dir=str(tmp_path), eval_threads=1, eval_abandoned_max=2))
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await engine.evaluate({"work": 4000})
        async with asyncio.timeout(GENEROUS_S):
            result = await engine.evaluate({})
        assert result.value == {"allow": True, "reasons": []}
        assert engine.queue_stats().abandoned == 1  # the slow one is still running meanwhile
    finally:
        await engine.aclose()


async def _until(predicate: object, seconds: float = GENEROUS_S) -> None:
    assert callable(predicate)
    async with asyncio.timeout(seconds):
        while not predicate():
            await asyncio.sleep(0.02)
