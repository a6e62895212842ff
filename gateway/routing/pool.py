"""The replicas of one upstream: which one a request goes to, and how each one is doing."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gateway.ports import Health
from gateway.routing.circuit import BreakerSettings, CircuitBreaker, CircuitState
from gateway.routing.rendezvous import load_bound, stable_hash, weight

Balance = Literal["affinity", "round_robin", "least_loaded"]

_EWMA_WEIGHT = 0.2  # of the newest sample in the time-to-first-byte average


@dataclass(frozen=True, slots=True)
class PoolSettings:
    # affinity: rendezvous hashing on the session key, with bounded load (least loaded without a key)
    balance: Balance = "affinity"
    bounded_load_factor: float = 1.25  # a replica spills above this times the average in flight...
    min_load_bound: int = 16  # ...and never below this many requests in flight (per gateway process)
    breaker: BreakerSettings = field(default_factory=BreakerSettings)
    # With requests in flight, or one answered this recently, a replica is busy, not down: a
    # probe it leaves unanswered or answers "unhealthy" does not count against it.
    busy_grace_s: float = 30.0


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    address: str
    circuit: CircuitState
    in_flight: int
    ttfb_s: float | None  # moving average of the time to the first byte, None before any success
    probe: Health | None  # the last active probe's answer, None before any


class ReplicaPool:
    """Chooses replicas (`acquire`), counts what is in flight on each (`release`), and keeps a
    circuit breaker per replica fed by the outcomes of attempts and by active probes.

    Not thread-safe: one pool per upstream per event loop, touched only from that loop.
    """

    def __init__(
        self,
        addresses: Sequence[str],
        settings: PoolSettings = PoolSettings(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not addresses:
            raise ValueError("a pool needs at least one replica")
        self.addresses = tuple(addresses)
        self._settings = settings
        self._clock = clock
        self._hashes = [stable_hash(address) for address in addresses]
        self._breakers = [CircuitBreaker(settings.breaker) for _ in addresses]
        self._in_flight = [0] * len(addresses)
        self._total = 0
        self._ttfb: list[float | None] = [None] * len(addresses)
        self._answered_at: list[float | None] = [None] * len(addresses)  # last first byte or end
        self._probes: list[Health | None] = [None] * len(addresses)
        self._cursor = 0  # round robin, and least-loaded tie-breaks

    def acquire(
        self, key: str | None, tried: Collection[int] = (), respect_health: bool = True
    ) -> int | None:
        """A replica for the request, counted in flight until `release`; None if none may take it.

        `tried` are replicas this request already failed on. With `respect_health` false, open
        circuits are ignored: the last resort when nothing healthy is left.
        """
        if len(self._breakers) == 1 and not tried and self._breakers[0].closed:
            # A single endpoint in good health, the common case: nothing to choose or to time.
            self._in_flight[0] += 1
            self._total += 1
            return 0
        now = self._clock()
        replica = self._choose(key, tried, respect_health, now)
        if replica is not None:
            self._in_flight[replica] += 1
            self._total += 1
            self._breakers[replica].dispatched(now)
        return replica

    def release(self, replica: int, answered: bool = False) -> None:
        """The request is over; `answered`: it was a stream the replica served to its end."""
        self._in_flight[replica] -= 1
        self._total -= 1
        self._breakers[replica].abandoned()
        if answered:
            self._answered_at[replica] = self._clock()

    def succeeded(self, replica: int, first_byte_s: float) -> None:
        self._answered_at[replica] = self._clock()
        self._breakers[replica].succeeded()
        previous = self._ttfb[replica]
        self._ttfb[replica] = (
            first_byte_s if previous is None else previous + _EWMA_WEIGHT * (first_byte_s - previous)
        )

    def failed(self, replica: int, *, counts: bool) -> None:
        """An attempt failed; `counts` says whether that says something about the replica's health."""
        if counts:
            self._breakers[replica].failed(self._clock())

    def probed(self, replica: int, health: Health) -> None:
        """An active probe's answer. Only a refused connection counts against a busy replica."""
        self._probes[replica] = health
        now = self._clock()
        if health is not Health.UP and health is not Health.UNREACHABLE and self.busy(replica, now):
            return
        self._breakers[replica].probed(health is Health.UP, now)

    def busy(self, replica: int, now: float) -> bool:
        """Serving requests: some in flight (each bounded by its own timeouts), or one answered lately."""
        if self._in_flight[replica]:
            return True
        answered = self._answered_at[replica]
        return answered is not None and now - answered <= self._settings.busy_grace_s

    def status(self) -> list[ReplicaStatus]:
        now = self._clock()
        return [
            ReplicaStatus(address, breaker.state(now), in_flight, ttfb, probe)
            for address, breaker, in_flight, ttfb, probe in zip(
                self.addresses, self._breakers, self._in_flight, self._ttfb, self._probes, strict=True
            )
        ]

    def _choose(
        self, key: str | None, tried: Collection[int], respect_health: bool, now: float
    ) -> int | None:
        breakers = self._breakers
        if len(breakers) == 1:  # a single endpoint: nothing to choose
            if tried or (respect_health and not breakers[0].available(now)):
                return None
            return 0
        open_to = [
            i
            for i, breaker in enumerate(breakers)
            if i not in tried and (not respect_health or breaker.available(now))
        ]
        if not open_to:
            return None
        balance = self._settings.balance
        if balance == "affinity" and key is not None:
            return self._by_affinity(key, open_to)
        if balance == "round_robin":
            return self._round_robin(open_to)
        return self._least_loaded(open_to)

    def _by_affinity(self, key: str, open_to: list[int]) -> int:
        """The first replica in the key's rendezvous order that is under the load bound: in one
        pass, the heaviest-weighted of those under it (no sort on the hot path)."""
        settings = self._settings
        bound = load_bound(self._total, len(open_to), settings.bounded_load_factor, settings.min_load_bound)
        key_hash = stable_hash(key)
        hashes, in_flight = self._hashes, self._in_flight
        best, best_weight = open_to[0], -1
        for replica in open_to:
            if in_flight[replica] < bound:
                replica_weight = weight(key_hash, hashes[replica])
                if replica_weight > best_weight:
                    best, best_weight = replica, replica_weight
        return best  # every one over the bound cannot happen while factor > 1

    def _round_robin(self, open_to: list[int]) -> int:
        count = len(self._breakers)
        start = self._cursor
        replica = min(open_to, key=lambda i: (i - start) % count)
        self._cursor = (replica + 1) % count
        return replica

    def _least_loaded(self, open_to: list[int]) -> int:
        count = len(self._breakers)
        start = self._cursor
        in_flight = self._in_flight
        replica = min(open_to, key=lambda i: (in_flight[i], (i - start) % count))
        self._cursor = (replica + 1) % count
        return replica
