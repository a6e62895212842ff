"""Budget and rate-limit leases, and settles sent in batches (docs/architecture.md, Leases).

A worker that meters many requests of one plan (a tenant's, or a key's) a second takes a
*slice* of its budgets and rate limits in one store call (a lease), admits requests
against it with no store call, and sends their settlements together: at most `FLUSH_S`
(and a tick) after the first of them, or at once when `FLUSH_EVERY` are waiting. Each call
also tops the slice up (or shrinks it), so a busy plan costs the store one call per flush
interval.

Sizing: a slice covers `HORIZON_S` of the plan's recent rate here, and takes at most
1/`SHARE` of what a hard budget or a rate limit has left beyond it; a slice that would
cover fewer than `MIN_REQUESTS` requests is not worth a lease, so near a limit (or at a low
rate) every request is reserved exactly, on its own, as without leases. Whatever the
sizing, the store refuses any hold past a hard limit: the sum of the slices of every
worker is part of what it counts as used.

A lease unused for `IDLE_S` is given back; one whose call went unanswered admits nothing
until a call is answered (the request goes the exact way: a store that stays away is
failed closed as before), and its batch is sent again, the same batch, until the store
takes it (once: by batch id) or `give_up_s` passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.errors import StateStoreUnavailable
from gateway.loop_turn import ONE_TURN
from gateway.metering.lease import Lease, LeaseDraw
from gateway.metering.plan import MeterPlan, Periods
from gateway.metering.records import ReserveOutcome, ReserveRequest, Settlement
from gateway.ports import StateStore

logger = logging.getLogger("tollgate.metering")

HORIZON_S = 0.25  # a slice covers this long of the plan's recent rate in this worker
# A finished request's settlement waits at most FLUSH_S (plus one tick, TICK_S), or until
# FLUSH_EVERY wait. Longer batches fold more of a session's turns into one record update and
# cost the store fewer calls (docs/benchmarks.md, "Longer settle batches"); the wait is what
# the store's view of the spend, and a session's record, may trail by.
FLUSH_S = 0.05
FLUSH_EVERY = 128
TICK_S = FLUSH_S / 2
IDLE_S = 0.5  # a lease unused this long is given back
SHARE = 16  # a slice takes at most this fraction of what a hard limit has left
MIN_REQUESTS = 8  # a slice smaller than this many requests: exact reservations instead
RENEW_S = 2.0  # a lease is extended when it has less than this left beyond its requests' needs
FIRST_RETRY_S = 0.2
MAX_RETRY_S = 5.0
_HEADROOM = 1.25  # per-request amounts vary: a slice is sized for a little more than the average


@dataclass(slots=True)
class _Demand:
    """What this worker has seen of one plan: its rate, its requests' average amounts, and
    what its limits had left at the store's last answer."""

    window_start: float
    count: int = 0
    rate: float = 0.0  # requests per second
    amounts: list[float] | None = None  # average upper bound per request, per budget
    costs: list[float] | None = None  # average cost per request, per rate limit
    remaining: list[int] | None = None  # per budget: limit - used (None: not known yet)
    rate_remaining: list[int] | None = None  # per rate limit

    def note(self, now: float) -> None:
        self.count += 1
        elapsed = now - self.window_start
        if elapsed >= HORIZON_S:
            self.rate = self.count / elapsed
            self.window_start, self.count = now, 0

    def current_rate(self, now: float) -> float:
        """The last window's rate, or this one's when it is already higher (a burst)."""
        return max(self.rate, self.count / max(now - self.window_start, 0.05))

    def learn(self, amounts: tuple[int, ...], costs: tuple[int, ...]) -> None:
        if self.amounts is None or self.costs is None:
            self.amounts, self.costs = [float(a) for a in amounts], [float(c) for c in costs]
            return
        for j, amount in enumerate(amounts):
            self.amounts[j] += (amount - self.amounts[j]) / 16
        for i, cost in enumerate(costs):
            self.costs[i] += (cost - self.costs[i]) / 16


class Leases:
    def __init__(
        self,
        store: StateStore,
        lease_grace_s: float,
        keep_s: int,
        monotonic: Callable[[], float] = time.monotonic,
        session_hold_s: float = 0.0,
    ) -> None:
        self._store = store
        self._session_hold_s = session_hold_s  # how long a session's record updates may wait (`lease.py`)
        self._grace_s = lease_grace_s
        self._keep_s = keep_s
        self._give_up_s = keep_s / 2  # a batch id is remembered for keep_s: retries stay inside it
        self._monotonic = monotonic
        self._demand: dict[tuple[int, str], _Demand] = {}
        self._leases: dict[tuple[int, str], Lease] = {}
        self._lease_demand: dict[str, _Demand] = {}  # lease id -> its plan's demand
        self._plans: dict[int, MeterPlan] = {}  # keeps each plan alive while its id is a key
        self._span_s = 0.0  # the longest request deadline seen, from admission
        self._ticker: asyncio.Task[None] | None = None
        self._syncs: dict[str, asyncio.Task[None]] = {}
        self._closed = False

    def __len__(self) -> int:
        return len(self._leases)

    def waiting_batches(self) -> int:
        """Settle batches sent but not known to be applied (the store did not answer)."""
        return sum(1 for lease in self._leases.values() if lease.sending is not None and lease.broken)

    async def draw(
        self,
        plan: MeterPlan,
        periods: Periods,
        counters: tuple[tuple[str, int], ...],
        request: ReserveRequest,
        deadline: float,
    ) -> tuple[LeaseDraw, ReserveOutcome] | None:
        """Admit the request against this worker's lease of the plan (taking or topping it up
        first when that is worth it); None when it must be reserved exactly."""
        if self._closed:
            return None
        # One turn of the loop, as a store call would have taken: the requests that arrived
        # together go on through the stages together (measured: without it, a leased request
        # cost the worker more CPU than an exactly reserved one; docs/benchmarks.md, Leases).
        await ONE_TURN
        now = self._monotonic()
        key = (id(plan), periods.day)
        self._plans[id(plan)] = plan
        demand = self._demand.get(key)
        if demand is None:
            # A new plan, or a new day: the days before are not metered again.
            for stale in [k for k in self._demand if k[1] != periods.day]:
                del self._demand[stale]
            demand = self._demand[key] = _Demand(now)
        demand.note(now)
        self._span_s = max(self._span_s, deadline - now)
        amounts = tuple(charge.amount for charge in request.budgets)
        costs = tuple(charge.cost for charge in request.rates)
        demand.learn(amounts, costs)
        until = deadline + self._grace_s
        lease = self._leases.get(key)
        if lease is not None and lease.can_draw(amounts, costs, until):
            return self._drawn(lease, amounts, costs, now)
        if lease is None or lease.closed:
            if lease is not None and not lease.idle:
                return None  # the old one still has settlements to send
            if self._room(demand, None, now) is None:
                return None
            lease = self._leases[key] = Lease(request.tenant, plan, counters, now, self._session_hold_s)
            self._lease_demand[lease.lease_id] = demand
            self._start_ticker()
        if lease.broken or lease.closing:
            return None
        await self._sync(lease)
        if lease.can_draw(amounts, costs, until):
            return self._drawn(lease, amounts, costs, self._monotonic())
        return None

    def _drawn(
        self, lease: Lease, amounts: tuple[int, ...], costs: tuple[int, ...], now: float
    ) -> tuple[LeaseDraw, ReserveOutcome]:
        draw = lease.draw(amounts, costs, now)
        used = tuple(
            max(0, used - hold + drawn + pending)
            for used, hold, drawn, pending in zip(
                lease.used, lease.hold, lease.drawn, lease.pending_spent, strict=True
            )
        )
        return draw, ReserveOutcome(True, used, lease.rate_headers_states(now))

    def observe(
        self, plan: MeterPlan, periods: Periods, request: ReserveRequest, outcome: ReserveOutcome
    ) -> None:
        """What an exact reservation's answer says of the plan's limits, for sizing."""
        demand = self._demand.get((id(plan), periods.day))
        if demand is None:
            return
        demand.remaining = [
            charge.limit - used for charge, used in zip(request.budgets, outcome.used, strict=True)
        ]
        demand.rate_remaining = [state.remaining for state in outcome.rates]

    def settled(self, draw: LeaseDraw, settlement: Settlement | None, tokens: int) -> None:
        """A request admitted against a lease is over; its settlement joins the next batch.
        Rate refunds are not sent: unused tokens went back into the slice (settle leaves
        them out of a leased request's settlement)."""
        lease = draw.lease
        if settlement is not None and settlement.refunds:
            settlement = dataclasses.replace(settlement, refunds=())
        lease.finished(draw, settlement, tokens, self._monotonic())
        if len(lease.pending) >= FLUSH_EVERY and lease.lease_id not in self._syncs:
            self._sync_soon(lease)

    def _room(self, demand: _Demand, lease: Lease | None, now: float) -> tuple[list[int], list[int]] | None:
        """How much a slice should hold beyond what is drawn: per budget, per rate limit; None
        when a slice would be too small to be worth it (then requests are reserved exactly)."""
        amounts, costs = demand.amounts, demand.costs
        if amounts is None or costs is None or demand.remaining is None or demand.rate_remaining is None:
            return None
        n = demand.current_rate(now) * HORIZON_S
        if n < MIN_REQUESTS:
            return None
        plan = lease.plan if lease is not None else None
        budget_room = []
        for j, average in enumerate(amounts):
            room = math.ceil(n * average * _HEADROOM)
            hard = plan.budgets[j].hard if plan is not None else True
            if hard:
                room = min(room, demand.remaining[j] // SHARE)
                if room < MIN_REQUESTS * average:
                    return None
            budget_room.append(room)
        rate_room = []
        for i, average in enumerate(costs):
            left = demand.rate_remaining[i]
            if lease is not None:
                left += lease.taken[i] - lease.consumed[i]
            room = min(math.ceil(n * average * _HEADROOM), left // SHARE)
            if room < MIN_REQUESTS * average:
                return None
            rate_room.append(room)
        return budget_room, rate_room

    async def _sync(self, lease: Lease) -> None:
        """One call for the lease, shared by every request waiting on it."""
        task = self._syncs.get(lease.lease_id)
        if task is None:
            task = self._sync_soon(lease)
        await asyncio.shield(task)

    def _sync_soon(self, lease: Lease) -> asyncio.Task[None]:
        task = asyncio.ensure_future(self._call(lease))
        self._syncs[lease.lease_id] = task
        task.add_done_callback(lambda _: self._syncs.pop(lease.lease_id, None))
        return task

    async def _call(self, lease: Lease) -> None:
        now = self._monotonic()
        demand = self._lease_demand.get(lease.lease_id)
        sized = self._room(demand, lease, now) if demand is not None else None
        if sized is None:
            lease.closing = True
            sized = ([0] * len(lease.hold), [0] * len(lease.taken))
        sync = lease.next_sync(
            sized[0],
            sized[1],
            self._span_s + self._grace_s + RENEW_S,
            self._keep_s,
            now=now,
        )
        try:
            grant = await self._store.lease(sync)
        except StateStoreUnavailable as exc:
            self._failed(lease, exc)
            return
        except Exception as failure:  # not the store's absence: admit nothing, try again later
            logger.exception("lease call failed", extra={"tenant": lease.tenant})
            self._failed(lease, StateStoreUnavailable(f"The lease call failed: {type(failure).__name__}."))
            return
        lease.answered(sync, grant, now)
        if demand is not None:
            demand.remaining = [
                b.limit - (used - hold)
                for b, used, hold in zip(sync.budgets, grant.used, grant.holds, strict=True)
            ]
            if grant.state == "held":
                demand.rate_remaining = [state.remaining for state in grant.rates]
        if grant.state == "closed" and not sync.close:
            logger.warning(
                "a lease ended in the store before the worker gave it back (its lease time passed)",
                extra={"tenant": lease.tenant},
            )

    def _failed(self, lease: Lease, exc: StateStoreUnavailable) -> None:
        now = self._monotonic()
        if not lease.broken:
            lease.failed_since = now
            logger.warning(
                "lease call failed: the state store is unavailable; retrying in the background",
                extra={"tenant": lease.tenant, "reason": str(exc)},
            )
        lease.broken = True
        lease.retry_wait = min(max(lease.retry_wait * 2, FIRST_RETRY_S), MAX_RETRY_S)
        lease.retry_at = now + lease.retry_wait
        if now - lease.failed_since >= self._give_up_s and lease.sending is not None:
            logger.error(
                "settle batch abandoned: the state store stayed unavailable; the lease is released "
                "by its lease time",
                extra={"tenant": lease.tenant, "settlements": len(lease.sending.settlements)},
            )
            lease.sending = None
            lease.closed = True

    def _start_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.ensure_future(self._tick())

    async def _tick(self) -> None:
        while self._leases:
            await asyncio.sleep(TICK_S)
            now = self._monotonic()
            for key, lease in list(self._leases.items()):
                if lease.lease_id in self._syncs:
                    continue
                if lease.closed and lease.idle:
                    del self._leases[key]
                    self._lease_demand.pop(lease.lease_id, None)
                elif self._due(lease, now):
                    self._sync_soon(lease)

    def _due(self, lease: Lease, now: float) -> bool:
        if lease.broken:
            return now >= lease.retry_at
        if lease.pending and (now - lease.first_pending_at >= FLUSH_S or len(lease.pending) >= FLUSH_EVERY):
            return True
        if lease.holds_due(now):
            return True
        if lease.closed:
            return False
        if now - lease.last_draw >= IDLE_S:
            lease.closing = True
        if lease.closing:
            return lease.inflight == 0
        if lease.expires_at - now < self._span_s + self._grace_s + RENEW_S / 2:
            return True
        # Less than half a slice left to draw on: top it up before requests miss it.
        return any(
            2 * (h - d - p) < h for h, d, p in zip(lease.hold, lease.drawn, lease.pending_spent, strict=True)
        ) or any(2 * (t - c) < t for t, c in zip(lease.taken, lease.consumed, strict=True))

    async def aclose(self) -> None:
        """Give every lease back with its last batch (one try each, after any call in flight)."""
        self._closed = True
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        await asyncio.gather(*self._syncs.values(), return_exceptions=True)
        for lease in self._leases.values():
            lease.closing = True
        await asyncio.gather(
            *(self._call(lease) for lease in self._leases.values() if not lease.closed or not lease.idle)
        )
        left = [
            lease
            for lease in self._leases.values()
            if lease.sending is not None or lease.pending or lease.held
        ]
        if left:
            logger.error(
                "settle batches abandoned at shutdown: the state store is unavailable",
                extra={
                    "settlements": sum(
                        len(x.pending) + (len(x.sending.settlements) if x.sending else 0) for x in left
                    ),
                    "session_updates": sum(len(updates) for x in left for _, updates in x.held.values()),
                },
            )
        self._leases.clear()
