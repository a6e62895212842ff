"""Metrics read from where they already live, at snapshot or scrape time, never per request:
circuit states (the routing pools), drop counts (span queue, metric export, decision log),
the policy evaluation queue (the embedded engine's threads) and budgets (the state store,
shared by every worker and replica)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gateway.config import GatewayConfig
from gateway.errors import StateStoreUnavailable
from gateway.metering.plan import Budget, utc_now
from gateway.ports import EvaluationQueue, StateStore
from gateway.routing.circuit import CircuitState
from gateway.routing.upstream_route import UpstreamRoute
from telemetry.registry import Labels, Source

logger = logging.getLogger("tollgate.telemetry")

_CIRCUIT_VALUES = {CircuitState.CLOSED: 0.0, CircuitState.HALF_OPEN: 1.0, CircuitState.OPEN: 2.0}
_BUDGET_READ_TIMEOUT_S = 1.0


def circuit_states(routes: Mapping[str, UpstreamRoute]) -> Source:
    def read() -> Iterable[tuple[Labels, float]]:
        for name, route in routes.items():
            for replica, status in enumerate(route.pool.status()):
                yield (name, str(replica)), _CIRCUIT_VALUES[status.circuit]

    return read


def policy_queue_states(queue: EvaluationQueue, labels: Labels) -> Source:
    """The embedded engine's evaluations by state: waiting, running, abandoned."""

    def read() -> Iterable[tuple[Labels, float]]:
        stats = queue.stats()
        return [
            ((*labels, "waiting"), float(stats.waiting)),
            ((*labels, "running"), float(stats.running)),
            ((*labels, "abandoned"), float(stats.abandoned)),
        ]

    return read


def drop_counts(counts: Mapping[str, Callable[[], int]]) -> Source:
    """signal -> running total of what was dropped."""

    def read() -> Iterable[tuple[Labels, float]]:
        return [((signal,), float(count())) for signal, count in counts.items()]

    return read


@dataclass(frozen=True, slots=True)
class _TenantBudget:
    tenant: str
    budget: Budget
    labels: Labels


class BudgetReader:
    """Each tenant-wide budget's limit and what is used of it now, from the state store."""

    def __init__(self, config: GatewayConfig, store: StateStore) -> None:
        self._store = store
        self._budgets: list[_TenantBudget] = []
        for tenant, spec in config.tenants.items():
            for budget in spec.budgets:
                hard = budget.kind == "hard"
                if budget.usd is not None:
                    limit = round(budget.usd * 1_000_000)
                    self._add(tenant, Budget("t", budget.window, "usd", limit, hard), budget.kind)
                if budget.tokens is not None:
                    self._add(tenant, Budget("t", budget.window, "tok", budget.tokens, hard), budget.kind)

    def _add(self, tenant: str, budget: Budget, kind: str) -> None:
        unit = "usd" if budget.unit == "usd" else "tokens"
        self._budgets.append(_TenantBudget(tenant, budget, (tenant, budget.window, unit, kind)))

    @property
    def limits(self) -> list[tuple[Labels, float]]:
        return [(b.labels, _amount(b.budget, b.budget.limit)) for b in self._budgets]

    async def used(self) -> list[tuple[Labels, float]]:
        """What the store says now; budgets it could not be asked about are left out."""
        at = utc_now()
        by_tenant: dict[str, list[_TenantBudget]] = {}
        for item in self._budgets:
            by_tenant.setdefault(item.tenant, []).append(item)
        found: list[tuple[Labels, float]] = []
        for tenant, items in by_tenant.items():
            try:
                async with asyncio.timeout(_BUDGET_READ_TIMEOUT_S):
                    used = await self._store.counters(tenant, tuple(i.budget.counter(at) for i in items))
            except (StateStoreUnavailable, TimeoutError):
                logger.warning("budget metrics unavailable: the state store cannot be read")
                return found
            found.extend((i.labels, _amount(i.budget, u)) for i, u in zip(items, used, strict=True))
        return found


def _amount(budget: Budget, value: int) -> float:
    return value / 1_000_000 if budget.unit == "usd" else float(value)


class SessionLeaders:
    """The ten sessions with the most tokens and the ten with the most spend, from the store."""

    def __init__(self, store: Callable[[], StateStore | None], tenants: Iterable[str], n: int = 10) -> None:
        self._store = store
        self._tenants = tuple(tenants)
        self._n = n

    async def top(self) -> list[tuple[Labels, float]]:
        found: list[tuple[Labels, float]] = []
        store = self._store()
        if store is None:  # no session request in this worker yet: the embedded file stays unopened
            return found
        try:
            async with asyncio.timeout(_BUDGET_READ_TIMEOUT_S):
                by_tokens = await store.sessions(self._tenants, "tokens", self._n)
                by_spend = await store.sessions(self._tenants, "spend", self._n)
        except (StateStoreUnavailable, TimeoutError):
            logger.warning("session metrics unavailable: the state store cannot be read")
            return found
        found += [
            ((r.tenant, r.session[:12], "tokens"), float(r.input_tokens + r.output_tokens)) for r in by_tokens
        ]
        found += [((r.tenant, r.session[:12], "usd"), r.cost_micros / 1_000_000) for r in by_spend]
        return found
