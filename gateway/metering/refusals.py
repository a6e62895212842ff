"""What a client is told about its limits: the x-ratelimit-* headers, in OpenAI's names and
formats, on every response of a rate-limited caller, and the 429s when a limit or a hard
budget says no."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gateway.errors import QuotaExceeded, RateLimitExceeded
from gateway.metering.plan import Budget, RateLimit
from gateway.metering.records import RateState

_UNIT_NAMES = {"requests": "requests per minute (RPM)", "tokens": "tokens per minute (TPM)"}


_HEADER_NAMES = {
    unit: (f"x-ratelimit-limit-{unit}", f"x-ratelimit-remaining-{unit}", f"x-ratelimit-reset-{unit}")
    for unit in ("requests", "tokens")
}


def rate_headers(limits: Sequence[RateLimit], states: Sequence[RateState]) -> dict[str, str]:
    """For requests and for tokens, the limit with the least remaining (tenant or key; on a
    tie, the one furthest from reset, then the first)."""
    tightest: dict[str, RateState] = {}
    for limit, state in zip(limits, states, strict=True):
        best = tightest.get(limit.unit)
        if (
            best is None
            or state.remaining < best.remaining
            or (state.remaining == best.remaining and state.reset_s > best.reset_s)
        ):
            tightest[limit.unit] = state
    headers: dict[str, str] = {}
    for unit, (limit_name, remaining_name, reset_name) in _HEADER_NAMES.items():
        shown = tightest.get(unit)
        if shown is None:
            continue
        headers[limit_name] = str(shown.per_minute)
        headers[remaining_name] = str(shown.remaining)
        headers[reset_name] = duration(shown.reset_s)
    return headers


def duration(seconds: float) -> str:
    """OpenAI's style: "20ms", "1.5s", "6m0s"."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    if seconds < 60:
        return f"{round(seconds, 3):g}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s"


def rate_limited(
    tenant: str, limits: Sequence[RateLimit], states: Sequence[RateState], headers: dict[str, str]
) -> RateLimitExceeded:
    limit, state = max(zip(limits, states, strict=True), key=lambda pair: pair[1].retry_after_s)
    wait = state.retry_after_s
    error = RateLimitExceeded(
        f"Rate limit reached for {_UNIT_NAMES[limit.unit]} of {_whose(tenant, limit.scope)}: "
        f"limit {limit.per_minute}, remaining {state.remaining}. Please try again in {duration(wait)}.",
        headers={**headers, "retry-after": str(max(1, math.ceil(wait)))},
    )
    error.type = limit.unit
    return error


def too_large_for_rate(tenant: str, limit: RateLimit, cost: int) -> RateLimitExceeded:
    error = RateLimitExceeded(
        f"Request too large for {_UNIT_NAMES[limit.unit]} of {_whose(tenant, limit.scope)}: "
        f"limit {limit.per_minute}, requested {cost}. Lower max_tokens or the size of the messages."
    )
    error.type = limit.unit
    return error


def quota_exceeded(tenant: str, budget: Budget, used: int, needed: int) -> QuotaExceeded:
    if budget.unit == "usd":
        amounts = f"${budget.limit / 1e6:.6g}, used ${used / 1e6:.6g}, this request needs ${needed / 1e6:.6g}"
    else:
        amounts = f"{budget.limit} tokens, used {used}, this request needs {needed}"
    period = "daily" if budget.window == "day" else "monthly"
    return QuotaExceeded(
        f"You exceeded your current quota: the {period} budget of {_whose(tenant, budget.scope)} "
        f"({amounts} even at the smallest allowed max_tokens). It resets at the start of the next "
        f"{budget.window} (UTC)."
    )


def _whose(tenant: str, scope: str) -> str:
    return f"tenant '{tenant}'" if scope == "t" else f"key {scope.removeprefix('k.')} of tenant '{tenant}'"
