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


def rate_headers(limits: Sequence[RateLimit], states: Sequence[RateState]) -> dict[str, str]:
    """For requests and for tokens, the limit with the least remaining (tenant or key)."""
    headers: dict[str, str] = {}
    for unit in ("requests", "tokens"):
        pairs = [(lim, st) for lim, st in zip(limits, states, strict=True) if lim.unit == unit]
        if not pairs:
            continue
        _, state = min(pairs, key=lambda pair: (pair[1].remaining, -pair[1].reset_s))
        headers[f"x-ratelimit-limit-{unit}"] = str(state.per_minute)
        headers[f"x-ratelimit-remaining-{unit}"] = str(state.remaining)
        headers[f"x-ratelimit-reset-{unit}"] = duration(state.reset_s)
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
