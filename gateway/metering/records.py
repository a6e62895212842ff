"""What the core and a state store exchange (the `StateStore` port in gateway/ports.py).

Plain values, not changed once made: those made for every request are slotted classes with
their `__init__` written out (compiled, about 0.1 us each, where a named tuple's `__new__` or
a dataclass's generated `__init__` runs as Python: 0.3 us and more; docs/architecture.md,
Compiled request path), the others named tuples and frozen dataclasses. Money is integer
micro-dollars everywhere; times the store reads are its own clock (Redis TIME, the machine's
clock for SQLite), so every replica sharing a store agrees on them.

A *counter* is one budget total (spent + reserved) of one tenant, named by a string the
core builds (`"t:day:2026-11-22:usd"`, `"k.3f9a0c1b2d4e:month:2026-11:tok"`); a *rate* is
one rate limit's GCRA state (`"t:rpm"`). Both are scoped to the tenant given with them,
which is also what keys them together in a store (one Redis Cluster hash slot per tenant).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from gateway.sessions.records import SessionUpdate

WINDOW_US = 60_000_000
"""The rate-limit window: limits are per minute."""


@dataclass(slots=True, init=False)
class BudgetCharge:
    """Reserve `amount` on one counter; a hard counter refuses to go past `limit`."""

    counter: str
    amount: int
    limit: int
    hard: bool
    expires_at: int  # unix seconds after which the counter (its window over) may be dropped

    def __init__(self, counter: str, amount: int, limit: int, hard: bool, expires_at: int) -> None:
        self.counter = counter
        self.amount = amount
        self.limit = limit
        self.hard = hard
        self.expires_at = expires_at


@dataclass(slots=True, init=False)
class RateCharge:
    """Take `cost` (requests or tokens) from a per-minute GCRA limit."""

    counter: str
    cost: int
    per_minute: int

    def __init__(self, counter: str, cost: int, per_minute: int) -> None:
        self.counter = counter
        self.cost = cost
        self.per_minute = per_minute

    @property
    def increment_us(self) -> int:
        """How far the theoretical arrival time moves for this cost (exact, rounded up)."""
        return -(-self.cost * WINDOW_US // self.per_minute)


@dataclass(slots=True, init=False)
class ReserveRequest:
    """Everything one reserve checks and takes, atomically: all of it or none of it."""

    tenant: str
    reservation_id: str
    budgets: tuple[BudgetCharge, ...]
    rates: tuple[RateCharge, ...]
    lease_s: float  # an open reservation is released this long after it was made

    def __init__(
        self,
        tenant: str,
        reservation_id: str,
        budgets: tuple[BudgetCharge, ...],
        rates: tuple[RateCharge, ...],
        lease_s: float,
    ) -> None:
        self.tenant = tenant
        self.reservation_id = reservation_id
        self.budgets = budgets
        self.rates = rates
        self.lease_s = lease_s


class RateState(NamedTuple):
    """A rate limit as the x-ratelimit-* headers show it, after the request (or at its refusal)."""

    per_minute: int
    remaining: int
    reset_s: float  # until the limit is back to its full capacity
    retry_after_s: float  # 0 when admitted; else how long until this cost would fit


class ReserveOutcome(NamedTuple):
    """`used` is spent + reserved per budget charge (in order): after the reservation when
    admitted, before it when refused. `rates` follows the rate charges' order."""

    admitted: bool
    used: tuple[int, ...]
    rates: tuple[RateState, ...]


@dataclass(slots=True, init=False)
class LedgerEntry:
    """One request's spend, added to the ledger row (day, key, model) of its tenant."""

    day: str  # YYYY-MM-DD, UTC
    key_id: str
    model: str  # the upstream model id that served it
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cost_micros: int
    requests: int
    workflow: str  # the request's workflow (gateway/stages/label.py): never free text

    def __init__(
        self,
        day: str,
        key_id: str,
        model: str,
        prompt_tokens: int,
        cached_tokens: int,
        completion_tokens: int,
        cost_micros: int,
        requests: int = 1,
        workflow: str = "default",
    ) -> None:
        self.day = day
        self.key_id = key_id
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = cached_tokens
        self.completion_tokens = completion_tokens
        self.cost_micros = cost_micros
        self.requests = requests
        self.workflow = workflow


@dataclass(slots=True, init=False)
class Settlement:
    """The actual cost of a request, replacing its reservation (if it still has one).

    Applying it twice is the same as once: a store remembers settled ids for `keep_s`.
    """

    tenant: str
    reservation_id: str
    spent: tuple[tuple[str, int, int], ...]  # (counter, actual amount, expires_at)
    refunds: tuple[RateCharge, ...]  # rate-limit tokens reserved but not used, given back
    ledger: LedgerEntry | None
    keep_s: int  # how long the settled id is remembered
    # The request was refused after its reserve went unanswered: should the store have
    # applied that reserve, what it took from the rate limits is given back too.
    release: bool
    # The request's session record update, applied with the settle (and only when it applies).
    session: SessionUpdate | None

    def __init__(
        self,
        tenant: str,
        reservation_id: str,
        spent: tuple[tuple[str, int, int], ...],
        refunds: tuple[RateCharge, ...],
        ledger: LedgerEntry | None,
        keep_s: int,
        release: bool = False,
        session: SessionUpdate | None = None,
    ) -> None:
        self.tenant = tenant
        self.reservation_id = reservation_id
        self.spent = spent
        self.refunds = refunds
        self.ledger = ledger
        self.keep_s = keep_s
        self.release = release
        self.session = session


@dataclass(frozen=True, slots=True)
class SpendRow:
    tenant: str
    day: str
    key_id: str
    model: str
    requests: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cost_micros: int
    workflow: str = "default"


@dataclass(frozen=True, slots=True)
class StoredResponse:
    status: int
    body: bytes


@dataclass(frozen=True, slots=True)
class IdempotencyClaim:
    """What a store knows of an Idempotency-Key: `claimed` means the caller now owns it."""

    state: Literal["claimed", "in_flight", "done", "mismatch"]
    response: StoredResponse | None = None
