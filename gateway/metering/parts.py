"""Metering's parts, built from config around one state store, for the composition root.

Metering is on when the config has a `state` or a `live_keys` block, or when any tenant or
key has budgets, rate limits or session caps (then on the embedded SQLite store). With it on,
every request's spend goes to the ledger, metered or not.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gateway.config import GatewayConfig, StateConfig
from gateway.exchange import Candidate
from gateway.metering.admin import SpendAdmin
from gateway.metering.bands import BudgetBands
from gateway.metering.leases import Leases
from gateway.metering.meter import Meter
from gateway.metering.plan import MeterPlans
from gateway.metering.prices import PriceBook
from gateway.metering.settle import Settle
from gateway.ports import StateStore
from gateway.sessions.settings import SessionSettings


def state_config(config: GatewayConfig) -> StateConfig | None:
    """The store to use, or None when nothing is metered and no store is configured."""
    if config.state is not None:
        return config.state
    if config.live_keys is not None:  # live keys live in the state store, and may carry budgets
        return StateConfig()
    return StateConfig() if MeterPlans(config).any_metered or _session_caps(config) else None


def _session_caps(config: GatewayConfig) -> bool:
    """Whether the config caps sessions' tokens or dollars, which are reserved like budgets."""
    if not config.sessions.enabled:
        return False
    limits = [config.sessions.limits, *(t.sessions.limits for t in config.tenants.values())]
    limits += [k.session_limits for k in config.keys if k.session_limits is not None]
    return any(lim.max_tokens is not None or lim.max_usd is not None for lim in limits)


@dataclass(frozen=True, slots=True)
class MeteringParts:
    store: StateStore
    meter: Meter  # the stage: after the request-side policy stages, before route
    settle: Settle  # a finisher
    bands: BudgetBands  # `await bands.band(principal)` for the policy input's "budget"
    admin: SpendAdmin | None  # GET /admin/spend, when `admin` is configured
    leases: Leases | None = None  # this worker's leases (`state.leases`), shared by every meter

    async def aclose(self) -> None:
        await self.settle.aclose()
        await self.store.aclose()


def replanned(parts: MeteringParts, config: GatewayConfig, state: StateConfig) -> MeteringParts:
    """The same store and settle, with the meter, bands and spend report of an edited config
    (its tenants, keys and model aliases: a config reload)."""
    meter, bands, admin = _planned(config, state, parts.store, parts.leases)
    return dataclasses.replace(parts, meter=meter, bands=bands, admin=admin)


def metering_parts(config: GatewayConfig, state: StateConfig, store: StateStore) -> MeteringParts:
    hold_s = config.sessions.update_hold_s if config.sessions.enabled else 0.0
    leases = (
        Leases(store, state.lease_s, state.settled_keep_s, session_hold_s=hold_s) if state.leases else None
    )
    meter, bands, admin = _planned(config, state, store, leases)
    prices = PriceBook.from_config(config.prices)
    return MeteringParts(
        store=store,
        meter=meter,
        # Session records ride on the settle (gateway/sessions/update.py).
        settle=Settle(
            store,
            prices,
            config.metering,
            state,
            leases,
            SessionSettings(config) if config.sessions.enabled else None,
        ),
        bands=bands,
        admin=admin,
        leases=leases,
    )


def _planned(
    config: GatewayConfig, state: StateConfig, store: StateStore, leases: Leases | None
) -> tuple[Meter, BudgetBands, SpendAdmin | None]:
    plans = MeterPlans(config)
    prices = PriceBook.from_config(config.prices)
    bands = BudgetBands(store, plans, config.metering.band_cache_s)
    routes = {
        alias: [Candidate(c.upstream, c.model) for c in candidates if c.mirror is None]
        for alias, candidates in config.models.items()
    }
    admin = SpendAdmin(store, config.admin.tokens, list(config.tenants)) if config.admin is not None else None
    idle_s = config.sessions.idle_ttl_s  # a session's cap counters are kept as long as its record
    meter = Meter(
        store, plans, prices, routes, config.metering, state, bands, leases=leases, session_idle_s=idle_s
    )
    return meter, bands, admin
