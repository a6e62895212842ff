"""The circuit breaker of one replica, on a hand-driven clock."""

from __future__ import annotations

from gateway.routing.circuit import BreakerSettings, CircuitBreaker, CircuitState

SETTINGS = BreakerSettings(failure_threshold=3, cooldown_s=10.0, max_cooldown_s=25.0)


def _opened(now: float = 0.0) -> CircuitBreaker:
    breaker = CircuitBreaker(SETTINGS)
    for _ in range(SETTINGS.failure_threshold):
        breaker.dispatched(now)
        breaker.failed(now)
    return breaker


def test_consecutive_failures_open_it() -> None:
    breaker = CircuitBreaker(SETTINGS)
    breaker.failed(0.0)
    breaker.failed(0.0)
    assert breaker.available(0.0)
    breaker.failed(0.0)
    assert breaker.state(0.0) is CircuitState.OPEN
    assert not breaker.available(5.0)


def test_a_success_resets_the_count() -> None:
    breaker = CircuitBreaker(SETTINGS)
    for _ in range(5):
        breaker.failed(0.0)
        breaker.failed(0.0)
        breaker.succeeded()
    assert breaker.state(0.0) is CircuitState.CLOSED


def test_after_the_cooldown_one_trial_at_a_time() -> None:
    breaker = _opened()
    assert breaker.state(10.0) is CircuitState.HALF_OPEN
    assert breaker.available(10.0)
    breaker.dispatched(10.0)
    assert not breaker.available(10.5)  # the trial is in flight
    breaker.abandoned()  # e.g. the client went away
    assert breaker.available(10.5)


def test_a_successful_trial_closes_it() -> None:
    breaker = _opened()
    breaker.dispatched(10.0)
    breaker.succeeded()
    assert breaker.state(10.0) is CircuitState.CLOSED
    breaker.failed(10.0)
    breaker.failed(10.0)
    assert breaker.available(10.0)  # the count started again


def test_a_failed_trial_reopens_it_for_longer_up_to_the_maximum() -> None:
    breaker = _opened()
    breaker.dispatched(10.0)
    breaker.failed(10.0)
    assert not breaker.available(29.9)  # 20 s this time
    assert breaker.available(30.0)
    breaker.dispatched(30.0)
    breaker.failed(30.0)
    assert not breaker.available(54.9)  # 25 s: the maximum, not 40
    assert breaker.available(55.0)


def test_probes() -> None:
    breaker = CircuitBreaker(SETTINGS)
    for _ in range(SETTINGS.probe_failures - 1):
        breaker.probed(False, 0.0)
    assert breaker.state(0.0) is CircuitState.CLOSED  # one slow answer is not a dead replica...
    breaker.probed(False, 0.0)
    assert breaker.state(0.0) is CircuitState.OPEN  # ...probe_failures of them in a row are
    breaker.probed(False, 5.0)
    assert not breaker.available(12.0)  # and keeps it open a cool-down past the last one
    breaker.probed(True, 12.0)
    assert breaker.state(12.0) is CircuitState.HALF_OPEN  # a healthy one lets it try at once
    assert breaker.available(12.0)
    breaker.probed(True, 12.0)
    assert breaker.state(12.0) is CircuitState.HALF_OPEN  # only a request's success closes it


def test_a_healthy_probe_or_a_served_request_resets_the_probe_failures() -> None:
    breaker = CircuitBreaker(SETTINGS)
    for reset in (lambda: breaker.probed(True, 0.0), breaker.succeeded):
        for _ in range(SETTINGS.probe_failures - 1):
            breaker.probed(False, 0.0)
        reset()
    breaker.probed(False, 0.0)
    assert breaker.state(0.0) is CircuitState.CLOSED
