"""The x-ratelimit-* headers and the 429s, in OpenAI's formats."""

from __future__ import annotations

from gateway.metering.plan import Budget, RateLimit
from gateway.metering.records import RateState
from gateway.metering.refusals import duration, quota_exceeded, rate_headers, rate_limited


def test_durations_read_like_openais() -> None:
    assert duration(0.0201) == "21ms"
    assert duration(1.5) == "1.5s"
    assert duration(360) == "6m0s"


def test_headers_show_the_tightest_limit_of_each_kind() -> None:
    limits = (
        RateLimit("t", "requests", 100),
        RateLimit("k.x", "requests", 10),
        RateLimit("t", "tokens", 1000),
    )
    states = (RateState(100, 90, 6, 0), RateState(10, 2, 48, 0), RateState(1000, 500, 30, 0))
    assert rate_headers(limits, states) == {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "2",
        "x-ratelimit-reset-requests": "48s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "500",
        "x-ratelimit-reset-tokens": "30s",
    }


def test_a_rate_refusal_names_the_limit_and_when_to_retry() -> None:
    limits = (RateLimit("t", "requests", 100), RateLimit("t", "tokens", 1000))
    states = (RateState(100, 50, 30, 0), RateState(1000, 0, 60, 2.2))
    error = rate_limited("acme", limits, states, {"x-ratelimit-limit-tokens": "1000"})
    assert (error.status, error.type, error.code) == (429, "tokens", "rate_limit_exceeded")
    assert error.headers["retry-after"] == "3"
    assert error.headers["x-ratelimit-limit-tokens"] == "1000"
    assert "tokens per minute (TPM) of tenant 'acme'" in error.message


def test_insufficient_quota_says_which_budget() -> None:
    error = quota_exceeded("acme", Budget("k.abc", "month", "usd", 5_000_000, True), 4_990_000, 20_000)
    assert (error.status, error.type, error.code) == (429, "insufficient_quota", "insufficient_quota")
    assert "monthly budget of key abc of tenant 'acme' ($5, used $4.99" in error.message
