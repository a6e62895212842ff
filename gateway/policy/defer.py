"""defer: a decision that sends non-urgent work away while capacity is short.

A policy may answer `"defer": true` (docs/policies.md), typically for `background`
requests while an upstream is throttling (input `capacity: "throttled"`) or a soft budget
is used up. The gateway honours it for `background` requests only: a synchronous one is
refused with 429 `deferred` and `Retry-After` before anything is reserved (decide runs
before meter); an async job (input `async: true`) is already the deferred form, so it goes
on to be stored and reserves as jobs do. A deferral never moves a request to an upstream:
the decision's route stays what the policy permits.
"""

from __future__ import annotations

import math

from gateway.errors import GatewayError
from gateway.exchange import Exchange

CAPACITY_OK = "ok"
CAPACITY_THROTTLED = "throttled"
DEFERRABLE_PRIORITY = "background"
DEFAULT_RETRY_AFTER_S = 60  # without a throttle pause to wait out, nor the policy's word


class Deferred(GatewayError):
    """A background request the policy deferred, sent synchronously: retry later, or submit it
    as a job (`Prefer: respond-async`)."""

    status = 429
    type = "requests"
    code = "deferred"


def capacity_fact(throttled_for_s: float) -> str:
    """The input's `capacity`: a word, never a number, so decisions stay cacheable."""
    return CAPACITY_THROTTLED if throttled_for_s > 0 else CAPACITY_OK


def defers(exchange: Exchange, defer: bool) -> bool:
    """Whether the decision's `defer` applies to this request (background ones only)."""
    return defer and exchange.priority == DEFERRABLE_PRIORITY


def deferred(retry_after_s: int | None, throttled_for_s: float, jobs: bool = True) -> Deferred:
    """The 429 for a deferred synchronous request; Retry-After is the policy's, else the rest
    of the throttle pause, else a minute. `jobs`: whether this gateway accepts async jobs."""
    if retry_after_s is None:
        retry_after_s = math.ceil(throttled_for_s) if throttled_for_s > 0 else DEFAULT_RETRY_AFTER_S
    instead = ", or submit it as an async job (Prefer: respond-async)" if jobs else ""
    return Deferred(
        "Deferred by policy: this background request is not served now, while capacity is short. "
        f"Retry after {retry_after_s} s{instead}.",
        headers={"retry-after": str(max(1, retry_after_s))},
    )
