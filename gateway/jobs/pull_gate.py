"""Whether a worker may pull async work now: synchronous traffic keeps priority.

A worker claims jobs only while fewer synchronous model calls than `limit` are in flight
in it, and not for `pause_s` after an upstream throttled (a 429, Workers AI's 3040), seen
by a synchronous request or a job alike: a burst of batch work must not be what pushes an
upstream over its capacity while interactive requests need it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.exchange import Exchange

THROTTLE_CODES = frozenset({"upstream_rate_limited", "upstream_overloaded"})


class PullGate:
    def __init__(self, limit: int, pause_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = limit
        self._pause_s = pause_s
        self._clock = clock
        self._in_flight: Callable[[], int] = lambda: 0
        self._throttled_until = 0.0

    def attach(self, in_flight: Callable[[], int]) -> None:
        """The count of synchronous model calls in flight (the HTTP edge's)."""
        self._in_flight = in_flight

    def throttled(self) -> None:
        self._throttled_until = self._clock() + self._pause_s

    def sync_load(self) -> int:
        return self._in_flight()

    def allows(self) -> bool:
        return self._in_flight() < self._limit and self._clock() >= self._throttled_until


class ThrottleWatch:
    """A finisher: an upstream's throttling, seen by any request, pauses pulling."""

    name = "throttle_watch"

    def __init__(self, gate: PullGate) -> None:
        self._gate = gate

    async def finish(self, exchange: Exchange) -> None:
        if any(attempt.error in THROTTLE_CODES for attempt in exchange.attempts):
            self._gate.throttled()
