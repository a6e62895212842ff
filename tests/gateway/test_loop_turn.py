"""`ONE_TURN`: awaited, one turn of the event loop, as `asyncio.sleep(0)` gives."""

from __future__ import annotations

import asyncio

from gateway.loop_turn import ONE_TURN


async def test_what_was_scheduled_before_runs_before_the_await_returns() -> None:
    ran: list[int] = []
    asyncio.get_running_loop().call_soon(ran.append, 1)
    await ONE_TURN
    assert ran == [1]


async def test_each_await_is_one_turn() -> None:
    turns: list[str] = []

    async def other() -> None:
        for _ in range(3):
            turns.append("other")
            await ONE_TURN

    task = asyncio.ensure_future(other())
    for _ in range(3):
        await ONE_TURN
        turns.append("this")
    await task
    assert turns == ["other", "this", "other", "this", "other", "this"]
