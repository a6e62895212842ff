"""A circuit breaker for one replica.

    closed ──(failure_threshold consecutive failures, or probe_failures failed probes)──▶ open
    open ──(cool-down over, or a probe answers)──▶ half-open
    half-open ──(its one trial request succeeds)──▶ closed
    half-open ──(the trial fails)──▶ open again, for twice the cool-down (up to the maximum)

Which failures count is gateway/routing/retry.py's `counts_against_replica`: throttling
(429, Workers AI 3040) does not, since the replica is alive. Only the pool touches a breaker,
on the event loop's thread, so no locking is needed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class CircuitState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    failure_threshold: int = 5  # consecutive failed attempts that open the circuit
    cooldown_s: float = 10.0  # how long it first stays open
    max_cooldown_s: float = 120.0  # the cool-down doubles after each failed trial, up to this
    probe_failures: int = 3  # consecutive failed probes that open the circuit


class CircuitBreaker:
    __slots__ = ("_cooldown", "_failures", "_probe_failures", "_reopens_at", "_settings", "_state", "_trial")

    def __init__(self, settings: BreakerSettings) -> None:
        self._settings = settings
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._probe_failures = 0  # consecutive; kept when the circuit opens, reset by any success
        self._cooldown = settings.cooldown_s
        self._reopens_at = 0.0  # when an open circuit turns half-open
        self._trial = False  # a half-open circuit's one trial request is in flight

    @property
    def closed(self) -> bool:
        return self._state is CircuitState.CLOSED

    def state(self, now: float) -> CircuitState:
        if self._state is CircuitState.OPEN and now >= self._reopens_at:
            self._state = CircuitState.HALF_OPEN
        return self._state

    def available(self, now: float) -> bool:
        """Whether a request may be sent to the replica now."""
        if self._state is CircuitState.CLOSED:  # the hot path: one comparison
            return True
        return self.state(now) is CircuitState.HALF_OPEN and not self._trial

    def dispatched(self, now: float) -> None:
        """A request was sent: in half-open state it is the trial."""
        if self._state is not CircuitState.CLOSED and self.state(now) is CircuitState.HALF_OPEN:
            self._trial = True

    def succeeded(self) -> None:
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._probe_failures = 0
        self._cooldown = self._settings.cooldown_s
        self._trial = False

    def failed(self, now: float) -> None:
        self._trial = False
        if self.state(now) is CircuitState.HALF_OPEN:
            self._cooldown = min(self._cooldown * 2, self._settings.max_cooldown_s)
            self._open(now)
            return
        self._failures += 1
        if self._state is CircuitState.CLOSED and self._failures >= self._settings.failure_threshold:
            self._open(now)

    def abandoned(self) -> None:
        """An attempt ended without showing whether the replica works (the client left, say)."""
        self._trial = False

    def probed(self, healthy: bool, now: float) -> None:
        """An active probe's answer: a healthy replica gets its trial now; one failing
        `probe_failures` probes in a row is opened, and kept open while they keep failing."""
        state = self.state(now)
        if healthy:
            self._probe_failures = 0
            if state is CircuitState.OPEN:
                self._state = CircuitState.HALF_OPEN
            return
        self._probe_failures += 1
        if state is CircuitState.OPEN:
            self._reopens_at = max(self._reopens_at, now + self._cooldown)
        elif self._probe_failures >= self._settings.probe_failures:
            self._trial = False
            self._open(now)

    def _open(self, now: float) -> None:
        self._state = CircuitState.OPEN
        self._failures = 0
        self._reopens_at = now + self._cooldown
