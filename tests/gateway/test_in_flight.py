"""One call per key at a time (`InFlight`), both ways of running it: in a task of its own
(detached, the default) and made by the first caller itself."""

from __future__ import annotations

import asyncio

import pytest

from gateway.in_flight import InFlight


class Calls:
    """A call that counts itself, and holds until released (or fails, when told to)."""

    def __init__(self) -> None:
        self.made = 0
        self.release = asyncio.Event()
        self.error: Exception | None = None

    async def __call__(self) -> str:
        self.made += 1
        made = self.made
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return f"answer {made}"


@pytest.mark.parametrize("detached", [True, False])
async def test_callers_arriving_during_a_call_share_it(detached: bool) -> None:
    flight: InFlight[str, str] = InFlight(detached=detached)
    calls = Calls()
    pending = [asyncio.ensure_future(flight.call("k", calls)) for _ in range(8)]
    await asyncio.sleep(0.01)
    calls.release.set()
    answers = await asyncio.gather(*pending)
    assert calls.made == 1
    assert [answer for answer, _ in answers] == ["answer 1"] * 8
    assert [started for _, started in answers] == [True] + [False] * 7
    assert (await flight.call("k", calls))[0] == "answer 2"  # a later caller makes a new call


@pytest.mark.parametrize("detached", [True, False])
async def test_a_failed_call_fails_every_caller_that_shared_it(detached: bool) -> None:
    flight: InFlight[str, str] = InFlight(detached=detached)
    calls = Calls()
    calls.error = ValueError("no answer")
    pending = [asyncio.ensure_future(flight.call("k", calls)) for _ in range(3)]
    await asyncio.sleep(0.01)
    calls.release.set()
    outcomes = await asyncio.gather(*pending, return_exceptions=True)
    assert calls.made == 1
    assert all(isinstance(outcome, ValueError) for outcome in outcomes)


@pytest.mark.parametrize("detached", [True, False])
async def test_a_waiting_caller_that_is_cancelled_leaves_the_others_their_answer(detached: bool) -> None:
    flight: InFlight[str, str] = InFlight(detached=detached)
    calls = Calls()
    first = asyncio.ensure_future(flight.call("k", calls))
    await asyncio.sleep(0.01)
    gone, kept = (asyncio.ensure_future(flight.call("k", calls)) for _ in range(2))
    await asyncio.sleep(0.01)
    gone.cancel()
    calls.release.set()
    assert (await first)[0] == (await kept)[0] == "answer 1"
    assert gone.cancelled() and calls.made == 1


async def test_a_detached_call_outlives_the_caller_that_started_it() -> None:
    flight: InFlight[str, str] = InFlight()
    calls = Calls()
    first = asyncio.ensure_future(flight.call("k", calls))
    await asyncio.sleep(0.01)
    second = asyncio.ensure_future(flight.call("k", calls))
    await asyncio.sleep(0.01)
    first.cancel()
    calls.release.set()
    assert await second == ("answer 1", False)
    assert calls.made == 1 and first.cancelled()


async def test_an_inline_call_goes_with_its_caller_and_one_waiting_caller_makes_it_again() -> None:
    flight: InFlight[str, str] = InFlight(detached=False)
    calls = Calls()
    first = asyncio.ensure_future(flight.call("k", calls))
    await asyncio.sleep(0.01)
    waiting = [asyncio.ensure_future(flight.call("k", calls)) for _ in range(4)]
    await asyncio.sleep(0.01)
    first.cancel()
    await asyncio.sleep(0.01)
    calls.release.set()
    answers = await asyncio.gather(*waiting)
    assert first.cancelled() and calls.made == 2
    assert [answer for answer, _ in answers] == ["answer 2"] * 4
    assert sorted(started for _, started in answers) == [False, False, False, True]
