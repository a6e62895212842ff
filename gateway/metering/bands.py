"""The budget band a policy sees (`input.budget`): "ok", "soft_exceeded" (a soft budget is
used up: a policy may, say, route to a cheaper model class) or "exceeded" (a hard budget is
used up). Read from the store at most once per `metering.band_cache_s` per key (the stale band
serving that key's other requests while one reads it), and refreshed for free by every
reservation the meter stage makes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from gateway.errors import StateStoreUnavailable
from gateway.exchange import Principal
from gateway.metering.plan import Budget, MeterPlans, PeriodsClock, utc_now
from gateway.ports import StateStore

logger = logging.getLogger("tollgate.metering")

BAND_OK = "ok"
BAND_SOFT_EXCEEDED = "soft_exceeded"
BAND_EXCEEDED = "exceeded"


def band_of(budgets: Sequence[Budget], used: Sequence[int]) -> str:
    band = BAND_OK
    for budget, spent in zip(budgets, used, strict=True):
        if spent >= budget.limit:
            if budget.hard:
                return BAND_EXCEEDED
            band = BAND_SOFT_EXCEEDED
    return band


class BudgetBands:
    def __init__(
        self,
        store: StateStore,
        plans: MeterPlans,
        ttl_s: float,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._store = store
        self._plans = plans
        self._ttl_s = ttl_s
        self._monotonic = monotonic
        self._periods = PeriodsClock(clock)
        self._cache: dict[tuple[str, str], tuple[float, str]] = {}
        self._reading: set[tuple[str, str]] = set()  # keys whose band a request is reading

    async def band(self, principal: Principal) -> str:
        """The caller's band; "ok" when it has no budgets or the store cannot be read (the
        meter stage still enforces hard budgets, or refuses when it cannot)."""
        budgets = self._plans.for_principal(principal).budgets
        if not budgets:
            return BAND_OK
        key = (principal.tenant.name, principal.key_id)
        cached = self._cache.get(key)
        now = self._monotonic()
        # While one request reads a stale band, the others take it as it was: a key's busy
        # requests all find it stale at once, and each reading it made as many reads.
        if cached is not None and (cached[0] > now or key in self._reading):
            return cached[1]
        periods = self._periods()
        self._reading.add(key)
        try:
            used = await self._store.counters(
                principal.tenant.name, tuple(b.counter(periods) for b in budgets)
            )
        except StateStoreUnavailable:
            logger.warning("budget band unavailable: the state store cannot be read")
            return BAND_OK
        finally:
            self._reading.discard(key)
        band = band_of(budgets, used)
        self._cache[key] = (now + self._ttl_s, band)
        return band

    def observe(self, principal: Principal, budgets: Sequence[Budget], used: Sequence[int]) -> None:
        """Remember the band that a reservation's counters show."""
        key = (principal.tenant.name, principal.key_id)
        self._cache[key] = (self._monotonic() + self._ttl_s, band_of(budgets, used))
