"""The attempt policy: when an upstream is tried again, and how long the first byte may take."""

from __future__ import annotations

import pytest

from gateway.errors import UpstreamError, UpstreamRejected, UpstreamTimeout, UpstreamUnavailable
from gateway.routing.retry import AttemptPolicy, counts_against_replica, estimated_prompt_tokens

POLICY = AttemptPolicy(retries=2, max_retry_wait_s=2.0, first_byte_s=10.0, first_byte_per_1k_tokens_s=0.5)
OVERLOADED = UpstreamUnavailable("busy", code="upstream_overloaded", retry_after=1.0)


def test_the_first_byte_allowance_grows_with_the_prompt() -> None:
    assert POLICY.first_byte_timeout(0) == 10.0
    assert POLICY.first_byte_timeout(100_000) == pytest.approx(60.0)
    assert estimated_prompt_tokens(4000) == 1000


def test_retries_are_bounded() -> None:
    error = UpstreamUnavailable("down")
    assert [POLICY.may_retry(error, made) for made in (1, 2, 3)] == [True, True, False]


@pytest.mark.parametrize(
    "error",
    [
        UpstreamRejected("bad request"),
        UpstreamError("daily allocation used", code="upstream_quota_exhausted", retryable=False),
        UpstreamError("credentials", code="upstream_auth_failed"),
    ],
)
def test_what_another_attempt_cannot_cure_is_not_retried(error: UpstreamError) -> None:
    assert not POLICY.may_retry(error, 1)


def test_retry_after_is_waited_out_only_as_the_last_resort_and_within_limits() -> None:
    assert POLICY.retry_after_wait(OVERLOADED, remaining=30.0, fallback_left=False) == 1.0
    assert POLICY.retry_after_wait(OVERLOADED, remaining=30.0, fallback_left=True) is None
    assert POLICY.retry_after_wait(OVERLOADED, remaining=0.5, fallback_left=False) is None
    long_wait = UpstreamUnavailable("busy", retry_after=7.0)
    assert POLICY.retry_after_wait(long_wait, remaining=30.0, fallback_left=False) is None
    assert POLICY.retry_after_wait(UpstreamUnavailable("down"), remaining=30.0, fallback_left=False) is None


def test_what_counts_against_a_replica() -> None:
    assert counts_against_replica(UpstreamUnavailable("refused"), deadline_ran_out=False)
    assert counts_against_replica(UpstreamError("HTTP 500", retryable=True), deadline_ran_out=False)
    assert counts_against_replica(UpstreamTimeout("slow"), deadline_ran_out=False)
    assert not counts_against_replica(UpstreamTimeout("slow"), deadline_ran_out=True)
    assert not counts_against_replica(OVERLOADED, deadline_ran_out=False)
    assert not counts_against_replica(UpstreamRejected("bad"), deadline_ran_out=False)
    assert not counts_against_replica(UpstreamError("plan", code="upstream_plan_required"), False)
