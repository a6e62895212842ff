"""One lease as a worker keeps it: what the store holds for it, what the requests admitted
against it have drawn, and the settlements waiting for the next call (`leases.py` decides
when that call is made and how large a slice to ask for).

The invariant that keeps a hard budget: for each budget counter, drawn (upper bounds of
the requests in flight) + pending (actual spend of finished requests not yet sent) is at
most `hold`, and `hold` is at most what the store holds for the lease in every state the
store may be in. So while a call is on its way, `hold` is what the store keeps whatever it
answers (the floor sent); a call that goes unanswered leaves it there.

With `hold_s` (`sessions.update_hold_s`, 0 by default), session record updates
(`Settlement.session`) wait longer than their settlements: up to `hold_s` from a session's
oldest waiting update, so that a hot session's turns reach the store folded into one
update, in the batch of the call after that (`SettleBatch.sessions`); a session's updates
stay in order, and an update that brings a checkpoint goes in the next batch, with the
session's others before it. A lease is not idle while it holds any, and its closing call
takes them all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gateway.metering.lease_records import LeaseBudget, LeaseGrant, LeaseRate, LeaseSync, SettleBatch
from gateway.metering.plan import MeterPlan
from gateway.metering.records import RateState, Settlement
from gateway.sessions.records import SessionUpdate


class Lease:
    def __init__(
        self,
        tenant: str,
        plan: MeterPlan,
        counters: tuple[tuple[str, int], ...],
        now: float,
        hold_s: float = 0.0,
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
        # Session updates held back, by session, oldest session first: (since, updates in order)
        self.held: dict[str, tuple[float, list[SessionUpdate]]] = {}
        self.held_now: set[str] = set()  # sessions whose updates go in the next batch, whatever their age
        self.hold_s = hold_s  # how long session updates may be held (0: they go with their settlements)
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
        actual spend waits for the next call, unused tokens go back into the slice, and its
        session update is held (with `hold_s`; else it goes with the settlement)."""
        for j, amount in enumerate(draw.amounts):
            self.drawn[j] -= amount
        for i, (limit, cost) in enumerate(zip(self.plan.rates, draw.costs, strict=True)):
            if limit.unit == "tokens" and cost > tokens:
                self.consumed[i] -= cost - tokens
        self.inflight -= 1
        if settlement is None:
            return
        update = settlement.session
        if update is not None and self.hold_s > 0:  # (a batch's `sessions` carry it, not the settlement)
            held = self.held.get(update.session)
            if held is None:
                held = self.held[update.session] = (now, [])
            held[1].append(update)
            if update.checkpoint is not None:  # others may look for it now
                self.held_now.add(update.session)
        for j, (_, amount, _) in enumerate(settlement.spent):
            self.pending_spent[j] += amount
        if not self.pending:
            self.first_pending_at = now
        self.pending.append(settlement)

    def next_sync(
        self,
        budget_room: list[int],
        rate_room: list[int],
        lease_s: float,
        keep_s: int,
        now: float = float("inf"),
    ) -> LeaseSync:
        """The next call at `now`: the batch (the unanswered one again, else the pending
        settlements and the session updates held `hold_s` by then), holds of drawn +
        `budget_room`, units of consumed + `rate_room` (0 and close once closing with nothing
        in flight). Lowers `hold` and `taken` to the floors it sends."""
        ending = (self.closing or self.closed) and self.inflight == 0
        if self.sending is None:
            sessions = (
                self._held_updates(float("inf") if ending else now - self.hold_s) if self.hold_s > 0 else None
            )
            if self.pending or sessions:
                self.sending = SettleBatch("b" + os.urandom(15).hex(), tuple(self.pending), keep_s, sessions)
                for j, spent in enumerate(self.pending_spent):
                    self.hold[j] -= spent  # that much of the hold becomes spend when the batch is applied
                    self.pending_spent[j] = 0
                self.pending = []
        close = ending and not self.held  # (a batch sent again first: the held updates go next)
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

    def holds_due(self, now: float) -> bool:
        """Whether held session updates are due in a batch at `now`: some held `hold_s`, or
        one brought a checkpoint."""
        held = self.held
        return bool(held) and (bool(self.held_now) or next(iter(held.values()))[0] <= now - self.hold_s)

    def _held_updates(self, held_before: float) -> tuple[SessionUpdate, ...]:
        """The held updates of the sessions due (oldest session first), taken out of `held`."""
        held = self.held
        if not held:
            return ()
        due = []
        for session, (since, _) in held.items():  # oldest first: stop at the first not due
            if since > held_before:
                break
            due.append(session)
        taken = [update for session in due for update in held.pop(session)[1]]
        for session in self.held_now:
            entry = held.pop(session, None)
            if entry is not None:
                taken += entry[1]
        self.held_now.clear()
        return tuple(taken)

    @property
    def idle(self) -> bool:
        """Nothing in flight, nothing to send: nothing would be lost by forgetting it."""
        return self.inflight == 0 and not self.pending and self.sending is None and not self.held


@dataclass(slots=True, init=False)
class LeaseDraw:
    """What one request took from a lease (on its ticket, for settle to give back)."""

    lease: Lease
    amounts: tuple[int, ...]  # per budget counter: the request's upper bound
    costs: tuple[int, ...]  # per rate limit: requests (1) or tokens (the bound)

    def __init__(self, lease: Lease, amounts: tuple[int, ...], costs: tuple[int, ...]) -> None:
        self.lease = lease
        self.amounts = amounts
        self.costs = costs
