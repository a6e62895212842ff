"""What the core and a state store exchange about leases (`StateStore.lease`).

A *lease* is a reservation a worker holds for many requests: on each budget counter an
amount (its *hold*), on each rate limit a number of units taken from the limit ahead of
use. The worker admits requests against it locally and sends their settlements in
batches. One `lease` call does everything at once: applies a batch of settlements
(exactly once, by batch id), then sets the lease's holds to what the worker asks, within
what the hard limits leave (`docs/architecture.md`, Leases).

Holds and units are absolute values, with a sequence number: a retried call asks for the
same state again rather than adding to it, and a call older than one already applied
changes no hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.metering.records import RateState, Settlement
from gateway.sessions.records import SessionUpdate


@dataclass(frozen=True, slots=True)
class SettleBatch:
    """Settlements of requests admitted against a lease (no reservation of their own in the
    store), applied together, once: the store remembers `batch_id` for `keep_s`. A batch
    is never changed once made, so a retry sends exactly what the first try did.

    `sessions`: the session record updates the batch applies, in order, when the worker held
    them back (a hot session's turns wait to be folded; `lease.py`): then its settlements'
    own `session` are not applied (they went, or go, in `sessions` of this batch or another);
    None: the settlements' own."""

    batch_id: str
    settlements: tuple[Settlement, ...]
    keep_s: int
    sessions: tuple[SessionUpdate, ...] | None = None

    def session_updates(self) -> tuple[SessionUpdate, ...]:
        """Every session update the batch applies, in the order it applies them."""
        if self.sessions is not None:
            return self.sessions
        return tuple(s.session for s in self.settlements if s.session is not None)


@dataclass(frozen=True, slots=True)
class LeaseBudget:
    """One budget counter's hold. The store sets it to `want`, lowered to what a hard limit
    leaves, but never below `floor` (what the worker has already admitted against)."""

    counter: str
    want: int
    floor: int
    limit: int
    hard: bool
    expires_at: int  # unix seconds after which the counter may be dropped


@dataclass(frozen=True, slots=True)
class LeaseRate:
    """One rate limit: `want` units (requests or tokens) taken into the lease since it began,
    in all (so the call is idempotent); the store takes what fits in the limit's window, never
    leaving less than `floor`, and gives back what a lower `want` no longer needs."""

    counter: str
    per_minute: int
    want: int
    floor: int


@dataclass(frozen=True, slots=True)
class LeaseSync:
    tenant: str
    lease_id: str
    seq: int  # grows by one per call; a call with a seq not above the stored one changes no hold
    lease_s: float  # the store releases the holds this long after the call, unless called again
    budgets: tuple[LeaseBudget, ...]
    rates: tuple[LeaseRate, ...]
    batch: SettleBatch | None
    close: bool = False  # give everything back and forget the lease (its id is refused after)


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """The store's answer. `state`: "held" (the holds below are the lease's now), "stale" (a
    later call was applied first: nothing changed), "closed" (the lease was given back or
    expired: it holds nothing). `used` is spent + reserved of each budget counter after the
    call (this lease's hold included); `rates` each limit as it now stands."""

    state: Literal["held", "stale", "closed"]
    batch_applied: bool  # False when the batch had been applied before (a retry)
    holds: tuple[int, ...]
    used: tuple[int, ...]
    taken: tuple[int, ...]
    rates: tuple[RateState, ...]
