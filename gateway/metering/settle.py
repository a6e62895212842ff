"""settle: after the response (or the failure), the request's actual cost replaces its
reservation, the ledger gets its row, and an Idempotency-Key gets the response to replay.

Actual usage is the upstream's when it reported it (cached input at the cached price);
otherwise, when an upstream did answer (a server that reports no usage, a stream cut short
or abandoned), the gateway's own count (gateway/metering/counted.py); nothing when no
upstream answered.
A settle the store could not take is tried again in the background (it is idempotent)
for half of `state.settled_keep_s` (`settle_retries.py`); past that, the reservation's
lease releases it. A request refused because its reserve went unanswered (a timeout: the
store may apply it late) is settled too, with nothing spent: that releases the id, and
the store refuses a reserve whose id it has already settled, in whichever order the two
arrive, so no refused request holds budget.
"""

from __future__ import annotations

import logging

from gateway.config import MeteringConfig, StateConfig
from gateway.errors import StateStoreUnavailable
from gateway.exchange import Exchange
from gateway.metering import idempotency
from gateway.metering.counted import settle_usage
from gateway.metering.leases import Leases
from gateway.metering.prices import PriceBook
from gateway.metering.records import LedgerEntry, RateCharge, Settlement
from gateway.metering.settle_retries import SettleRetries
from gateway.metering.ticket import MeterTicket
from gateway.ports import StateStore
from gateway.sessions import charges as session_caps
from gateway.sessions.settings import SessionSettings
from gateway.sessions.update import session_update

logger = logging.getLogger("tollgate.metering")


class Settle:
    name = "settle"

    def __init__(
        self,
        store: StateStore,
        prices: PriceBook,
        metering: MeteringConfig,
        state: StateConfig,
        leases: Leases | None = None,
        sessions: SessionSettings | None = None,
    ) -> None:
        self._store = store
        self._sessions = sessions
        self._prices = prices
        self._idempotency_ttl_s = metering.idempotency_ttl_s
        self._keep_s = state.settled_keep_s
        self._retries = SettleRetries(store, give_up_s=state.settled_keep_s / 2)
        self._leases = leases

    async def finish(self, exchange: Exchange) -> None:
        ticket = exchange.meter
        if ticket is None or ticket.replayed or exchange.principal is None:
            return
        tenant = exchange.principal.tenant.name
        if exchange.idempotency is not None:
            await idempotency.close(self._store, exchange, exchange.idempotency, self._idempotency_ttl_s)
        settlement = self._settlement(exchange, ticket, tenant)
        if ticket.lease is not None and self._leases is not None:
            # Admitted against this worker's lease: the settlement, its session update
            # included, goes in the lease's next batch (one store call for all of them).
            self._leases.settled(ticket.lease, settlement, _tokens(exchange))
            return
        if settlement is None:
            return
        if ticket.reserve_unanswered and not ticket.reserved:
            # The store just failed to answer; the release goes in the background rather
            # than hold the refusal back for another timeout.
            self._retries.add(settlement, exchange.request_id)
            return
        try:
            await self._store.settle(settlement)
        except StateStoreUnavailable:
            logger.warning(
                "settle failed: the state store is unavailable; retrying in the background",
                extra={"request_id": exchange.request_id, "tenant": tenant},
            )
            self._retries.add(settlement, exchange.request_id)

    def _settlement(self, exchange: Exchange, ticket: MeterTicket, tenant: str) -> Settlement | None:
        served = next((a for a in reversed(exchange.attempts) if a.status == 200), None)
        usage = settle_usage(exchange)
        if served is None:
            prompt = cached = completion = 0
        else:
            prompt, cached, completion = usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens
        price = self._prices.get(served.model) if served else None
        cost = price.cost_micros(prompt, cached, completion) if price else 0
        periods = ticket.periods
        tokens = prompt + completion
        # The counters reserved on (the plan's budgets, in order), else those of the periods.
        n = len(ticket.plan.budgets)  # a session's caps follow the plan's budgets (sessions/charges.py)
        counters = (
            [(c.counter, c.expires_at) for c in ticket.budgets[:n]]
            if ticket.budgets
            else [(b.counter(periods), b.expires_at(periods)) for b in ticket.plan.budgets]
        )
        spent = tuple(
            (counter, cost if b.unit == "usd" else tokens, expires_at)
            for b, (counter, expires_at) in zip(ticket.plan.budgets, counters, strict=True)
        ) + session_caps.spent(ticket.budgets[n:], tokens, cost)
        refunds: tuple[RateCharge, ...] = ()
        if ticket.lease is None or self._leases is None:  # a lease takes unused tokens back itself
            refunds = tuple(
                RateCharge(charge.counter, charge.cost - (prompt + completion), charge.per_minute)
                for limit, charge in zip(ticket.plan.rates, ticket.rates, strict=False)
                if limit.unit == "tokens" and charge.cost > prompt + completion
            )
        ledger = None
        if served is not None and exchange.principal is not None:
            day = periods.day
            ledger = LedgerEntry(
                day,
                exchange.principal.key_id,
                served.model,
                prompt,
                cached,
                completion,
                cost,
                workflow=exchange.workflow,
            )
        if not ticket.reserved and not ticket.reserve_unanswered and ledger is None:
            return None
        # Refused for want of the store's answer: should the reserve be applied after all,
        # the request takes nothing from the rate limits either.
        release = ticket.reserve_unanswered and not ticket.reserved and served is None
        session = None
        if self._sessions is not None and exchange.session is not None:
            session = session_update(exchange, self._sessions, prompt, cached, completion, cost, served)
            exchange.session.recorded = True
        return Settlement(
            tenant, ticket.reservation_id, spent, refunds, ledger, self._keep_s, release, session=session
        )

    async def aclose(self) -> None:
        """Give the leases back with their last batches; stop the retries, giving each
        pending settle one last try."""
        if self._leases is not None:
            await self._leases.aclose()
        await self._retries.aclose()


def _tokens(exchange: Exchange) -> int:
    """Prompt and completion tokens the request actually used (0 when no upstream answered)."""
    if not any(a.status == 200 for a in exchange.attempts):
        return 0
    usage = settle_usage(exchange)
    return usage.prompt_tokens + usage.completion_tokens
