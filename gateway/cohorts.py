"""Cohort scheduling: the requests a worker's event loop wakes in one turn take each phase
of the pipeline together.

Under load, one turn of the event loop wakes many requests at once (new requests read from
their sockets, upstream answers arrived). Run one after another to their next wait, each
request would go through admission, the policy, redaction and the upstream call (or the
guards, the reply and the finishers) with the code and data of each phase evicted from the
CPU's caches by the phases after it, and by the system calls between them; per request, the
pipeline's cost is mostly those cache misses, not its bytecode (docs/benchmarks.md, Cohorts).
`together()` at the start of a phase yields one turn, so that every request woken with this
one reaches the phase first, then runs it right after the others, its code and tables warm.

A yield costs a turn of the loop, so it is taken only while other model calls are in flight
in this process: a worker serving one request at a time never pays it.
"""

from __future__ import annotations

from gateway.loop_turn import ONE_TURN


class _Load:
    __slots__ = ("in_flight",)

    def __init__(self) -> None:
        self.in_flight = 0  # model calls under way in this process (`GatewayASGI` counts them)


_LOAD = _Load()


def entered() -> None:
    _LOAD.in_flight += 1


def left() -> None:
    _LOAD.in_flight -= 1


async def together() -> None:
    """Yield one turn of the event loop when other model calls are in flight."""
    if _LOAD.in_flight > 1:
        await ONE_TURN
