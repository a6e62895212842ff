"""settle: after the response (or the failure), the request's actual cost replaces its
reservation, the ledger gets its row, and an Idempotency-Key gets the response to replay.

Actual usage is the upstream's when it reported it (cached input at the cached price);
otherwise, when an upstream did answer (a server that reports no usage, a stream cut short
or abandoned), the gateway's own count (gateway/metering/counted.py); nothing when no
upstream answered.
A settle the store could not take is tried again in the background (it is idempotent)
for half of `state.settled_keep_s`; past that, the reservation's lease releases it.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.config import MeteringConfig, StateConfig
from gateway.errors import StateStoreUnavailable
from gateway.exchange import Exchange
from gateway.metering import idempotency
from gateway.metering.counted import settle_usage
from gateway.metering.prices import PriceBook
from gateway.metering.records import LedgerEntry, RateCharge, Settlement
from gateway.metering.ticket import MeterTicket
from gateway.ports import StateStore

logger = logging.getLogger("tollgate.metering")

_FIRST_RETRY_S = 0.2
_MAX_RETRY_S = 5.0


class Settle:
    name = "settle"

    def __init__(
        self,
        store: StateStore,
        prices: PriceBook,
        metering: MeteringConfig,
        state: StateConfig,
    ) -> None:
        self._store = store
        self._prices = prices
        self._idempotency_ttl_s = metering.idempotency_ttl_s
        self._keep_s = state.settled_keep_s
        self._retries: dict[asyncio.Task[None], Settlement] = {}

    async def finish(self, exchange: Exchange) -> None:
        ticket = exchange.meter
        if ticket is None or ticket.replayed or exchange.principal is None:
            return
        tenant = exchange.principal.tenant.name
        if exchange.idempotency is not None:
            await idempotency.close(self._store, exchange, exchange.idempotency, self._idempotency_ttl_s)
        settlement = self._settlement(exchange, ticket, tenant)
        if settlement is None:
            return
        try:
            await self._store.settle(settlement)
        except StateStoreUnavailable:
            logger.warning(
                "settle failed: the state store is unavailable; retrying in the background",
                extra={"request_id": exchange.request_id, "tenant": tenant},
            )
            task = asyncio.ensure_future(self._retry(settlement, exchange.request_id))
            self._retries[task] = settlement
            task.add_done_callback(lambda done: self._retries.pop(done, None))

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
        counters = (
            [(c.counter, c.expires_at) for c in ticket.budgets]
            if ticket.budgets
            else [(b.counter(periods), b.expires_at(periods)) for b in ticket.plan.budgets]
        )
        spent = tuple(
            (counter, cost if b.unit == "usd" else tokens, expires_at)
            for b, (counter, expires_at) in zip(ticket.plan.budgets, counters, strict=True)
        )
        refunds = tuple(
            RateCharge(charge.counter, charge.cost - (prompt + completion), charge.per_minute)
            for limit, charge in zip(ticket.plan.rates, ticket.rates, strict=False)
            if limit.unit == "tokens" and charge.cost > prompt + completion
        )
        ledger = None
        if served is not None and exchange.principal is not None:
            day = periods.day
            ledger = LedgerEntry(
                day, exchange.principal.key_id, served.model, prompt, cached, completion, cost
            )
        if not ticket.reserved and ledger is None:
            return None
        return Settlement(tenant, ticket.reservation_id, spent, refunds, ledger, self._keep_s)

    async def _retry(self, settlement: Settlement, request_id: str) -> None:
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self._keep_s / 2
        wait = _FIRST_RETRY_S
        while loop.time() + wait < give_up_at:
            await asyncio.sleep(wait)
            try:
                await self._store.settle(settlement)
                logger.info("settled after a retry", extra={"request_id": request_id})
                return
            except StateStoreUnavailable:
                wait = min(wait * 2, _MAX_RETRY_S)
        logger.error(
            "settle abandoned: the state store stayed unavailable; its reservation is released by its lease",
            extra={"request_id": request_id},
        )

    async def aclose(self) -> None:
        """Stop the retries, giving each pending settle one last try."""
        pending = dict(self._retries)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for settlement in pending.values():
            try:
                await self._store.settle(settlement)
            except StateStoreUnavailable:
                logger.error("settle abandoned at shutdown: the state store is unavailable")
