"""Whether a worker may pull async work now: synchronous traffic keeps priority.

A worker claims jobs only while fewer synchronous model calls than `limit` are in flight
in it, and not for `pause_s` after an upstream throttled (a 429, Workers AI's 3040), seen
by a synchronous request or a job alike: a burst of batch work must not be what pushes an
upstream over its capacity while interactive requests need it. With a host load file
(gateway/jobs/host_load.py) both are the host's: every gateway process's calls in flight,
and a pause any process of the host started.

Jobs share the worker's event loop with synchronous requests, so a job already running
would still take turns from them: with `yield_to_sync`, a running job also waits, at each
step (its start, before its upstream call, before its finishers), until no synchronous call
is in flight. Interactive requests then meet at most the steps already under way. A request
is counted only once it has been read and routed, and until then it waits for whatever job
steps the event loop has ready: `steps_per_pass` paces those (gateway/jobs/turns.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from gateway.exchange import Exchange
from gateway.jobs.turns import LoopTurns

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


class SharedThrottle(Protocol):
    """Throttle pauses shared by the processes of a host (gateway/jobs/host_load.py)."""

    def throttled(self, until: float) -> None:
        """This process paused pulling until `until` (`time.time()`)."""
        ...

    def throttled_until(self) -> float:
        """When the latest pause another process published ends (`time.time()`; 0: none)."""
        ...


class NoLoad:
    """No synchronous calls: the load of a process that serves none (yet)."""

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
        steps_per_pass: int | None = None,
    ) -> None:
        self._limit = limit
        self._turns = LoopTurns(steps_per_pass) if steps_per_pass else None
        self._pause_s = pause_s
        self._yield = yield_to_sync
        self._clock = clock
        self._load: SyncLoad = NoLoad()
        self._throttled_until = 0.0
        self._shared: SharedThrottle | None = None

    def attach(self, load: SyncLoad, shared: SharedThrottle | None = None) -> None:
        self._load = load
        self._shared = shared

    async def step(self) -> None:
        """A running job's turn: once no synchronous call is in flight, and, paced, once the
        event loop's pass has a turn left."""
        while True:
            if self._yield and self._load.in_flight:
                await self._load.idle()
            if self._turns is None:
                return
            await self._turns.take()
            if not (self._yield and self._load.in_flight):  # none started while it waited
                return

    def throttled(self) -> None:
        self._throttled_until = self._clock() + self._pause_s
        if self._shared is not None:
            self._shared.throttled(time.time() + self._pause_s)

    def throttled_for(self) -> float:
        """Seconds left of the pause after an upstream throttled, here or in another process of
        the host (0: none); the policy input's `capacity` reads it too (gateway/policy/defer.py)."""
        own = self._throttled_until - self._clock()
        shared = self._shared.throttled_until() - time.time() if self._shared is not None else 0.0
        return max(0.0, own, shared)

    def allows(self) -> bool:
        return self._load.in_flight < self._limit and self.throttled_for() == 0.0


class ThrottleWatch:
    """A finisher: an upstream's throttling, seen by any request, pauses pulling."""

    name = "throttle_watch"

    def __init__(self, gate: PullGate) -> None:
        self._gate = gate

    async def finish(self, exchange: Exchange) -> None:
        if any(attempt.error in THROTTLE_CODES for attempt in exchange.attempts):
            self._gate.throttled()
