"""Job steps paced over the event loop's passes (gateway/jobs/turns.py): a burst of job
steps does not stand in front of work that becomes ready while it runs."""

from __future__ import annotations

import asyncio

import pytest

from gateway.jobs.pull_gate import NoLoad, PullGate
from gateway.jobs.turns import LoopTurns


async def _burst(turns: LoopTurns, size: int, order: list[str]) -> list[asyncio.Task[None]]:
    async def job(i: int) -> None:
        await turns.take()
        order.append(f"job {i}")

    return [asyncio.ensure_future(job(i)) for i in range(size)]


async def test_a_burst_of_job_steps_runs_over_several_passes_not_in_one() -> None:
    order: list[str] = []
    jobs = await _burst(LoopTurns(per_pass=2), 12, order)

    async def interactive() -> None:
        for hop in range(3):  # a request's few hops through the loop, each a pass of its own
            order.append(f"interactive {hop}")
            await asyncio.sleep(0)

    request = asyncio.ensure_future(interactive())  # ready after the whole burst was
    await asyncio.gather(*jobs, request)
    assert sorted(order) == sorted([f"job {i}" for i in range(12)] + [f"interactive {h}" for h in range(3)])
    # every hop of the request waits for at most a pass's turns, never for the rest of the burst
    done_by_then = order.index("interactive 2") - 2
    assert done_by_then <= 2 * 3 + 2
    assert order.index("job 11") > order.index("interactive 2")


async def test_unpaced_the_same_burst_runs_first() -> None:
    order: list[str] = []
    jobs = await _burst(LoopTurns(per_pass=1000), 12, order)

    async def interactive() -> None:
        order.append("interactive")

    await asyncio.gather(*jobs, asyncio.ensure_future(interactive()))
    assert order[-1] == "interactive"


async def test_a_step_cancelled_while_it_waits_passes_its_turn_on() -> None:
    turns = LoopTurns(per_pass=1)
    order: list[str] = []
    jobs = await _burst(turns, 4, order)
    await asyncio.sleep(0)  # the first has its turn; the others wait
    jobs[1].cancel()
    results = await asyncio.gather(*jobs, return_exceptions=True)
    assert isinstance(results[1], asyncio.CancelledError)
    assert order == ["job 0", "job 2", "job 3"]


class _Busy(NoLoad):
    """A synchronous call in flight until `end()`."""

    def __init__(self) -> None:
        self.in_flight = 1
        self._ended = asyncio.Event()

    async def idle(self) -> None:
        await self._ended.wait()

    def end(self) -> None:
        self.in_flight = 0
        self._ended.set()


async def test_a_paced_step_still_waits_while_a_synchronous_call_is_in_flight() -> None:
    gate = PullGate(limit=1, pause_s=0.0, steps_per_pass=1)
    load = _Busy()
    gate.attach(load)
    step = asyncio.ensure_future(gate.step())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not step.done()
    load.end()
    await asyncio.wait_for(step, timeout=5)


@pytest.mark.parametrize("per_pass", [1, 3])
async def test_every_waiting_step_gets_its_turn(per_pass: int) -> None:
    order: list[str] = []
    await asyncio.gather(*await _burst(LoopTurns(per_pass), 50, order))
    assert order == [f"job {i}" for i in range(50)]
