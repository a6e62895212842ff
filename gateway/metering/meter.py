"""meter: idempotency (`idempotency.py`), rate limits and the budget reservation, before the
upstream is called.

The reservation is an upper bound of the request's cost: the input estimate
(`estimate.py`) at the worst input price among the candidates it may be routed to (route has
run: the alias and class a policy moved it to, a split's arm and its fallbacks), plus
the output bound (max_tokens times choices) at their worst output price. When a hard budget
cannot cover the requested max_tokens, max_tokens is lowered to what it covers (and the
`x-tollgate-max-tokens-clamped` header says so); below `metering.min_max_tokens` the
request is refused. The bound is written into the body sent upstream, so it is real.

Rate limits and budgets are taken in one atomic store call: all of them, or none.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from gateway.config import MeteringConfig, StateConfig
from gateway.errors import QuotaExceeded, StateStoreUnavailable
from gateway.exchange import Candidate, Endpoint, Exchange
from gateway.metering import estimate, idempotency, refusals
from gateway.metering.bands import BudgetBands
from gateway.metering.idempotency import IDEMPOTENCY_HEADER
from gateway.metering.images import ImageRule
from gateway.metering.leases import Leases
from gateway.metering.plan import MeterPlan, MeterPlans, Periods, PeriodsClock, utc_now
from gateway.metering.prices import PER_MILLION, Price, PriceBook
from gateway.metering.records import BudgetCharge, RateCharge, ReserveOutcome, ReserveRequest
from gateway.metering.ticket import MeterTicket
from gateway.output_limit import note_output_limit
from gateway.ports import StateStore
from gateway.random_ids import random_hex
from gateway.sessions import charges as session_caps

logger = logging.getLogger("tollgate.metering")

CLAMPED_HEADER = "x-tollgate-max-tokens-clamped"
_ATTEMPTS = 4  # reserve tries when other requests keep taking what a clamped one would fit
_UNBOUNDED = 2**62


class Meter:
    name = "meter"

    def __init__(
        self,
        store: StateStore,
        plans: MeterPlans,
        prices: PriceBook,
        routes: Mapping[str, Sequence[Candidate]],
        metering: MeteringConfig,
        state: StateConfig,
        bands: BudgetBands | None = None,
        clock: Callable[[], datetime] = utc_now,
        leases: Leases | None = None,
        session_idle_s: int = 86_400,
    ) -> None:
        self._store = store
        self._leases = leases
        self._plans = plans
        self._prices = prices
        self._routes = {alias: tuple(c) for alias, c in routes.items()}
        self._metering = metering
        self._lease_grace_s = state.lease_s
        self._fail_open = frozenset(state.fail_open_tenants)
        self._bands = bands
        self._periods = PeriodsClock(clock)
        self._session_idle_s = session_idle_s  # how long a session's cap counters are kept
        # id(plan) -> (the plan, kept so its id stays its own; periods; counters)
        image = metering.image_tokens
        self._default_image_rule = ImageRule(image.patch_px, image.max_per_image)
        self._image_rule_of = {
            model: ImageRule(rule.patch_px, rule.max_per_image)
            for model, rule in metering.image_tokens_by_model.items()
        }
        self._counter_cache: dict[int, tuple[MeterPlan, Periods, tuple[tuple[str, int], ...]]] = {}

    async def __call__(self, exchange: Exchange) -> None:
        principal = exchange.principal
        if principal is None:
            raise RuntimeError("meter runs after admit: the request has no principal")
        plan = self._plans.for_principal(principal)
        ticket = MeterTicket(random_hex(16), plan, self._periods())
        exchange.meter = ticket
        key = exchange.headers.get(IDEMPOTENCY_HEADER)
        try:
            if key is not None and not exchange.stream:
                exchange.idempotency = await idempotency.claim(
                    self._store, exchange, key, self._lease_s(exchange)
                )
                if exchange.replay_body is not None:
                    ticket.replayed = True
                    return
            # An alias the caller may not use is refused by route, uncharged.
            if (
                (plan.metered or session_caps.capped(exchange))
                and exchange.model_alias in self._routes
                and principal.tenant.may_use(exchange.model_alias)
            ):
                await self._reserve(exchange, ticket, plan)
        except StateStoreUnavailable:
            if principal.tenant.name not in self._fail_open:
                raise
            logger.warning(
                "state store unavailable: request let through unmetered (tenant fails open)",
                extra={"request_id": exchange.request_id, "tenant": principal.tenant.name},
            )

    def _lease_s(self, exchange: Exchange) -> float:
        return max(0.0, exchange.deadline - time.monotonic()) + self._lease_grace_s

    async def _reserve(self, exchange: Exchange, ticket: MeterTicket, plan: MeterPlan) -> None:
        tenant = ticket_tenant(exchange)
        chat = exchange.endpoint is Endpoint.CHAT
        # Tokens matter (budgets or a tokens limit): the output must be bounded and reserved.
        bounded = (
            bool(plan.budgets) or any(r.unit == "tokens" for r in plan.rates) or session_caps.capped(exchange)
        )
        input_tokens = estimate.input_tokens_bound(exchange, self._image_rules(exchange)) if bounded else 0
        choices = _choices(exchange) if chat else 1
        asked = estimate.requested_output(exchange.body) if chat else None
        cap = self._output_cap(asked, exchange) if chat and bounded else 0
        price = self._prices.worst(c.model for c in self._candidates(exchange))
        per_choice = cap
        request = self._request(ticket, tenant, plan, input_tokens, per_choice * choices, price, exchange)
        leased = None
        # A session's caps are counters of their own, reserved exactly with the request.
        if self._leases is not None and not session_caps.capped(exchange):
            counters = self._counters(plan, ticket.periods)
            leased = await self._leases.draw(plan, ticket.periods, counters, request, exchange.deadline)
        if leased is not None:
            ticket.lease, outcome = leased
        else:
            outcome, request, per_choice = await self._reserve_exactly(
                exchange, ticket, plan, request, (input_tokens, per_choice, choices, cap), price
            )
        ticket.budgets, ticket.rates, ticket.reserved = request.budgets, request.rates, ticket.lease is None
        ticket.input_tokens, ticket.output_tokens = input_tokens, per_choice * choices
        exchange.response_headers.update(refusals.rate_headers(plan.rates, outcome.rates))
        if self._bands is not None and exchange.principal is not None:
            self._bands.observe(exchange.principal, plan.budgets, outcome.used[: len(plan.budgets)])
        if chat and bounded:
            estimate.bound_output(exchange.body, per_choice)
            if per_choice < cap or (asked is not None and per_choice < asked):
                exchange.response_headers[CLAMPED_HEADER] = str(per_choice)
                note_output_limit(exchange, per_choice, "budget")
            elif asked is None:
                note_output_limit(exchange, per_choice, "default")

    async def _reserve_exactly(
        self,
        exchange: Exchange,
        ticket: MeterTicket,
        plan: MeterPlan,
        request: ReserveRequest,
        sizes: tuple[int, int, int, int],
        price: Price | None,
    ) -> tuple[ReserveOutcome, ReserveRequest, int]:
        """The request's own reservation: the admitted outcome, the request as reserved, and
        the output tokens per choice it covers (lowered to what a hard budget still covers)."""
        input_tokens, per_choice, choices, cap = sizes
        tenant = request.tenant
        for attempt in range(_ATTEMPTS):
            if attempt:
                request = self._request(
                    ticket, tenant, plan, input_tokens, per_choice * choices, price, exchange
                )
            outcome = await self._reserved(ticket, request)
            if self._leases is not None and not session_caps.capped(exchange):
                self._leases.observe(plan, ticket.periods, request, outcome)
            if outcome.admitted:
                return outcome, request, per_choice
            headers = refusals.rate_headers(plan.rates, outcome.rates)
            if any(state.retry_after_s > 0 for state in outcome.rates):
                exchange.response_headers.update(headers)
                raise refusals.rate_limited(tenant, plan.rates, outcome.rates, headers)
            n = len(plan.budgets)  # the session's caps follow the plan's budgets
            session_refusal = session_caps.refusal(request.budgets[n:], outcome.used[n:])
            if session_refusal is not None:
                raise session_refusal
            fits = self._fitting_output(plan, outcome.used[:n], input_tokens, price) // choices
            if fits < min(self._metering.min_max_tokens, cap):  # cap is 0 for embeddings: the input must fit
                exchange.response_headers.update(headers)
                raise self._quota_exceeded(tenant, plan, outcome.used, request)
            per_choice = min(per_choice, fits)
        raise self._quota_exceeded(tenant, plan, outcome.used, request)

    async def _reserved(self, ticket: MeterTicket, request: ReserveRequest) -> ReserveOutcome:
        """The store's answer; until it comes (or when none does) the ticket says the store
        may hold a reservation under the id, for settle to release."""
        ticket.reserve_unanswered = True
        try:
            outcome = await self._store.reserve(request)
        except StateStoreUnavailable as exc:
            ticket.reserve_unanswered = exc.may_have_applied
            raise
        ticket.reserve_unanswered = False
        return outcome

    def _output_cap(self, asked: int | None, exchange: Exchange) -> int:
        limit = exchange.decision.limits.max_tokens if exchange.decision is not None else None
        if asked is None:
            return limit if limit is not None else self._metering.default_max_tokens
        return asked if limit is None else min(asked, limit)

    def _image_rules(self, exchange: Exchange) -> tuple[ImageRule, ...]:
        """The image rules of the models the request may go to (the default's alone when no
        model has its own)."""
        by_model, default = self._image_rule_of, self._default_image_rule
        if not by_model:
            return (default,)
        return tuple({by_model.get(c.model, default) for c in self._candidates(exchange)} or {default})

    def _candidates(self, exchange: Exchange) -> Sequence[Candidate]:
        if exchange.candidates:  # route ran first
            return exchange.candidates
        candidates = self._routes.get(exchange.model_alias, ())
        decision = exchange.decision
        allowed = decision.route.upstreams if decision is not None else None
        return [c for c in candidates if allowed is None or c.upstream in allowed]

    def _request(
        self,
        ticket: MeterTicket,
        tenant: str,
        plan: MeterPlan,
        input_tokens: int,
        output_tokens: int,
        price: Price | None,
        exchange: Exchange,
    ) -> ReserveRequest:
        usd = price.cost_micros(input_tokens, 0, output_tokens) if price else 0
        tokens = input_tokens + output_tokens
        budgets = tuple(
            BudgetCharge(counter, usd if b.unit == "usd" else tokens, b.limit, b.hard, expires_at)
            for b, (counter, expires_at) in zip(
                plan.budgets, self._counters(plan, ticket.periods), strict=True
            )
        ) + session_caps.session_charges(exchange, tokens, usd, self._session_idle_s)
        rates = []
        for limit in plan.rates:
            cost = 1 if limit.unit == "requests" else input_tokens + output_tokens
            if cost > limit.per_minute:
                raise refusals.too_large_for_rate(tenant, limit, cost)
            rates.append(RateCharge(limit.counter, cost, limit.per_minute))
        return ReserveRequest(tenant, ticket.reservation_id, budgets, tuple(rates), self._lease_s(exchange))

    def _counters(self, plan: MeterPlan, periods: Periods) -> tuple[tuple[str, int], ...]:
        """The store counter and its expiry of each of the plan's budgets in these periods
        (built once a day per plan)."""
        cached = self._counter_cache.get(id(plan))
        if cached is not None and cached[0] is plan and cached[1] is periods:
            return cached[2]
        counters = tuple((b.counter(periods), b.expires_at(periods)) for b in plan.budgets)
        self._counter_cache[id(plan)] = (plan, periods, counters)
        return counters

    def _fitting_output(
        self, plan: MeterPlan, used: Sequence[int], input_tokens: int, price: Price | None
    ) -> int:
        """The most output tokens (all choices together) every hard budget still covers;
        negative when even the input does not fit."""
        fits: int | None = None
        for budget, spent in zip(plan.budgets, used, strict=True):
            if not budget.hard:
                continue
            room = budget.limit - spent
            if budget.unit == "tok":
                n = room - input_tokens
            else:
                left = room * PER_MILLION - (input_tokens * price.input if price else 0)
                n = -1 if left < 0 else (left // price.output if price and price.output else _UNBOUNDED)
            fits = n if fits is None else min(fits, n)
        return fits if fits is not None else _UNBOUNDED

    def _quota_exceeded(
        self, tenant: str, plan: MeterPlan, used: Sequence[int], request: ReserveRequest
    ) -> QuotaExceeded:
        for budget, spent, charge in zip(plan.budgets, used, request.budgets, strict=False):
            if budget.hard and spent + charge.amount > budget.limit:
                return refusals.quota_exceeded(tenant, budget, spent, charge.amount)
        hard = next((b for b in plan.budgets if b.hard), None)
        if hard is None:
            return QuotaExceeded("You exceeded your current quota.")
        return refusals.quota_exceeded(tenant, hard, 0, 0)


def ticket_tenant(exchange: Exchange) -> str:
    assert exchange.principal is not None  # checked by the stage before anything else
    return exchange.principal.tenant.name


def _choices(exchange: Exchange) -> int:
    n = exchange.body.get("n")
    return n if isinstance(n, int) and n > 0 else 1
