"""Whether a worker may pull async work now: synchronous traffic keeps priority.

A worker claims jobs only while fewer synchronous model calls than `limit` are in flight
in it, and not for `pause_s` after an upstream throttled (a 429, Workers AI's 3040), seen
by a synchronous request or a job alike: a burst of batch work must not be what pushes an
upstream over its capacity while interactive requests need it.

Jobs share the worker's event loop with synchronous requests, so a job already running
would still take turns from them: with `yield_to_sync`, a running job also waits, at each
step (before its upstream call, before its finishers), until no synchronous call is in
flight. Interactive requests then meet at most the steps already under way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from gateway.exchange import Exchange

THROTTLE_CODES = frozenset({"upstream_rate_limited", "upstream_overloaded"})


class SyncLoad(Protocol):
    """The HTTP edge's synchronous model calls (gateway.http.GatewayASGI)."""

    @property
    def in_flight(self) -> int: ...

    async def idle(self) -> None:
        """Return once no synchronous model call is in flight."""
        ...

    def watch(self, listener: Callable[[int], None]) -> None:
        """`listener(in_flight)` called at each change (the host load file publishes it)."""
        ...


class _NoLoad:
    in_flight = 0

    async def idle(self) -> None:
        return None

    def watch(self, listener: Callable[[int], None]) -> None:
        return None


class PullGate:
    def __init__(
        self,
        limit: int,
        pause_s: float,
        yield_to_sync: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limit = limit
        self._pause_s = pause_s
        self._yield = yield_to_sync
        self._clock = clock
        self._load: SyncLoad = _NoLoad()
        self._throttled_until = 0.0

    def attach(self, load: SyncLoad) -> None:
        self._load = load

    async def step(self) -> None:
        """A running job's turn: at once when no synchronous call is in flight, else once none is."""
        if self._yield and self._load.in_flight:
            await self._load.idle()

    def throttled(self) -> None:
        self._throttled_until = self._clock() + self._pause_s

    def throttled_for(self) -> float:
        """Seconds left of the pause after an upstream throttled (0: none); the policy input's
        `capacity` reads it too (gateway/policy/defer.py)."""
        return max(0.0, self._throttled_until - self._clock())

    def allows(self) -> bool:
        return self._load.in_flight < self._limit and self._clock() >= self._throttled_until


class ThrottleWatch:
    """A finisher: an upstream's throttling, seen by any request, pauses pulling."""

    name = "throttle_watch"

    def __init__(self, gate: PullGate) -> None:
        self._gate = gate

    async def finish(self, exchange: Exchange) -> None:
        if any(attempt.error in THROTTLE_CODES for attempt in exchange.attempts):
            self._gate.throttled()
