"""A stream's deadline (one timer for the whole stream): it cuts a wait for the upstream,
never the client's side of a relay, and never turns someone else's cancellation into a
timeout. (`test_forward.py` covers a stream cut at the deadline end to end.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from gateway.errors import UpstreamTimeout
from gateway.stream_deadline import StreamDeadline


async def paced(items: int, every_s: float) -> AsyncIterator[int]:
    for item in range(items):
        await asyncio.sleep(every_s)
        yield item


async def test_items_flow_and_the_end_is_none() -> None:
    deadline = StreamDeadline(time.monotonic() + 5)
    items = paced(3, 0)
    try:
        assert [await deadline.next(items) for _ in range(4)] == [0, 1, 2, None]
    finally:
        deadline.close()


async def test_a_wait_for_the_upstream_is_cut_at_the_deadline() -> None:
    deadline = StreamDeadline(time.monotonic() + 0.05)
    items = paced(2, 10)
    started = time.monotonic()
    try:
        with pytest.raises(UpstreamTimeout):
            await deadline.next(items)
    finally:
        deadline.close()
    assert time.monotonic() - started < 5
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the task is not left cancelled
    await asyncio.sleep(0.01)  # and its next wait is not cancelled either


async def test_a_deadline_passing_on_the_clients_side_fails_the_next_wait_only() -> None:
    deadline = StreamDeadline(time.monotonic() + 0.05)
    items = paced(5, 0)
    try:
        assert await deadline.next(items) == 0
        await asyncio.sleep(0.1)  # the client's side: not interrupted
        with pytest.raises(UpstreamTimeout):
            await deadline.next(items)
    finally:
        deadline.close()


async def test_someone_elses_cancellation_stays_a_cancellation() -> None:
    deadline = StreamDeadline(time.monotonic() + 5)
    items = paced(2, 10)

    async def relay() -> None:
        await deadline.next(items)

    task = asyncio.ensure_future(relay())
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline.close()


async def test_a_cancellation_arriving_with_the_deadline_stays_a_cancellation() -> None:
    deadline = StreamDeadline(time.monotonic() + 0.05)
    items = paced(2, 10)

    async def relay() -> None:
        await deadline.next(items)

    task = asyncio.ensure_future(relay())
    loop = asyncio.get_running_loop()
    # The client leaves as the deadline passes: at the deadline timer's own time, so both fire in
    # the same turn of the loop however late it wakes (a time of its own could fall a turn after)
    loop.call_at(deadline._handle.when(), task.cancel)
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline.close()


async def test_a_closed_deadline_never_fires() -> None:
    deadline = StreamDeadline(time.monotonic() + 0.02)
    deadline.close()
    await asyncio.sleep(0.05)
    items = paced(1, 0)
    assert await deadline.next(items) == 0
