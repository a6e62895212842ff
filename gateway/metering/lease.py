"""One lease as a worker keeps it: what the store holds for it, what the requests admitted
against it have drawn, and the settlements waiting for the next call (`leases.py` decides
when that call is made and how large a slice to ask for).

The invariant that keeps a hard budget: for each budget counter, drawn (upper bounds of
the requests in flight) + pending (actual spend of finished requests not yet sent) is at
most `hold`, and `hold` is at most what the store holds for the lease in every state the
store may be in. So while a call is on its way, `hold` is what the store keeps whatever it
answers (the floor sent); a call that goes unanswered leaves it there.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from gateway.metering.lease_records import LeaseBudget, LeaseGrant, LeaseRate, LeaseSync, SettleBatch
from gateway.metering.plan import MeterPlan
from gateway.metering.records import RateState, Settlement


class LeaseDraw(NamedTuple):
    """What one request took from a lease (on its ticket, for settle to give back)."""

    lease: Lease
    amounts: tuple[int, ...]  # per budget counter: the request's upper bound
    costs: tuple[int, ...]  # per rate limit: requests (1) or tokens (the bound)


class Lease:
    def __init__(
        self,
        tenant: str,
        plan: MeterPlan,
        counters: tuple[tuple[str, int], ...],
        now: float,
    ) -> None:
        self.lease_id = "l" + os.urandom(15).hex()
        self.tenant = tenant
        self.plan = plan
        self.counters = counters  # (counter, expires_at) per budget of the plan
        nb, nr = len(plan.budgets), len(plan.rates)
        self.hold = [0] * nb
        self.drawn = [0] * nb
        self.pending_spent = [0] * nb
        self.taken = [0] * nr  # rate units taken into the lease since it began
        self.consumed = [0] * nr  # of which used by admitted requests
        self.used = [0] * nb  # spent + reserved per counter, as the store last said
        self.rate_states: tuple[RateState, ...] = ()
        self.rates_at = now
        self.pending: list[Settlement] = []
        self.first_pending_at = 0.0
        self.sending: SettleBatch | None = None  # sent, not known to be applied
        self.seq = 0
        self.inflight = 0
        self.expires_at = 0.0  # monotonic; the store's lease ends no earlier
        self.last_draw = now
        self.broken = False  # the last call went unanswered: no local admission until one is
        self.failed_since = 0.0
        self.retry_at = 0.0
        self.retry_wait = 0.0
        self.closing = False  # give everything back once nothing is in flight
        self.closed = False  # the store holds nothing for it any more

    def can_draw(self, amounts: tuple[int, ...], costs: tuple[int, ...], until: float) -> bool:
        if self.closed or self.closing or self.broken or until > self.expires_at:
            return False
        for j, amount in enumerate(amounts):
            if self.drawn[j] + self.pending_spent[j] + amount > self.hold[j]:
                return False
        return all(self.consumed[i] + cost <= self.taken[i] for i, cost in enumerate(costs))

    def draw(self, amounts: tuple[int, ...], costs: tuple[int, ...], now: float) -> LeaseDraw:
        for j, amount in enumerate(amounts):
            self.drawn[j] += amount
        for i, cost in enumerate(costs):
            self.consumed[i] += cost
        self.inflight += 1
        self.last_draw = now
        return LeaseDraw(self, amounts, costs)

    def rate_headers_states(self, now: float) -> tuple[RateState, ...]:
        """Each limit as this worker sees it: the store's remaining at the last call, plus
        the units this lease took and has not used; reset counted down since then."""
        elapsed = now - self.rates_at
        return tuple(
            RateState(
                state.per_minute,
                max(0, state.remaining + self.taken[i] - self.consumed[i]),
                max(0.0, state.reset_s - elapsed),
                0.0,
            )
            for i, state in enumerate(self.rate_states)
        )

    def finished(self, draw: LeaseDraw, settlement: Settlement | None, tokens: int, now: float) -> None:
        """A request admitted against this lease is over: its bound is no longer drawn, its
        actual spend waits for the next call, unused tokens go back into the slice."""
        for j, amount in enumerate(draw.amounts):
            self.drawn[j] -= amount
        for i, (limit, cost) in enumerate(zip(self.plan.rates, draw.costs, strict=True)):
            if limit.unit == "tokens" and cost > tokens:
                self.consumed[i] -= cost - tokens
        self.inflight -= 1
        if settlement is None:
            return
        for j, (_, amount, _) in enumerate(settlement.spent):
            self.pending_spent[j] += amount
        if not self.pending:
            self.first_pending_at = now
        self.pending.append(settlement)

    def next_sync(
        self, budget_room: list[int], rate_room: list[int], lease_s: float, keep_s: int
    ) -> LeaseSync:
        """The next call: the batch (the unanswered one again, else the pending settlements),
        holds of drawn + `budget_room`, units of consumed + `rate_room` (0 and close once
        closing with nothing in flight). Lowers `hold` and `taken` to the floors it sends."""
        if self.sending is None and self.pending:
            self.sending = SettleBatch("b" + os.urandom(15).hex(), tuple(self.pending), keep_s)
            for j, spent in enumerate(self.pending_spent):
                self.hold[j] -= spent  # that much of the hold becomes spend when the batch is applied
                self.pending_spent[j] = 0
            self.pending = []
        close = (self.closing or self.closed) and self.inflight == 0
        budgets = []
        for j, ((counter, expires_at), budget) in enumerate(
            zip(self.counters, self.plan.budgets, strict=True)
        ):
            want = 0 if close else self.drawn[j] + budget_room[j]
            floor = min(self.hold[j], want)
            self.hold[j] = floor
            budgets.append(LeaseBudget(counter, want, floor, budget.limit, budget.hard, expires_at))
        rates = []
        for i, limit in enumerate(self.plan.rates):
            want = self.consumed[i] + (0 if close else rate_room[i])
            floor = min(self.taken[i], want)
            self.taken[i] = floor
            rates.append(LeaseRate(limit.counter, limit.per_minute, want, floor))
        self.seq += 1
        return LeaseSync(
            self.tenant, self.lease_id, self.seq, lease_s, tuple(budgets), tuple(rates), self.sending, close
        )

    def answered(self, sync: LeaseSync, grant: LeaseGrant, sent_at: float) -> None:
        self.sending = None  # applied now, or before
        self.broken = False
        self.retry_wait = 0.0
        if grant.state == "held":
            self.hold = list(grant.holds)
            self.taken = list(grant.taken)
            self.used = list(grant.used)
            self.rate_states = grant.rates
            self.rates_at = sent_at
            self.expires_at = sent_at + sync.lease_s
        elif grant.state == "closed":
            self.closed = True
            self.hold = [0] * len(self.hold)
            self.expires_at = 0.0

    @property
    def idle(self) -> bool:
        """Nothing in flight, nothing to send: nothing would be lost by forgetting it."""
        return self.inflight == 0 and not self.pending and self.sending is None
