"""A live key's own budgets and rate limits come on top of its tenant's, under its own scope,
as a config key's do."""

from __future__ import annotations

from gateway.config import BudgetConfig, RateLimitConfig
from gateway.exchange import Principal, Tenant
from gateway.keystore.records import KeyLimits
from gateway.metering.plan import Budget, MeterPlans, RateLimit
from tests.servers import gateway_config


def plans() -> MeterPlans:
    config = gateway_config(
        upstreams={"u": {"kind": "openai_compat", "base_url": "http://127.0.0.1:1/v1"}},
        models={"m": [{"upstream": "u", "model": "x"}]},
        tenants={
            "acme": {"budgets": [{"window": "month", "usd": 10}], "rate_limits": {"requests_per_minute": 60}}
        },
        keys=[],
    )
    return MeterPlans(config)


def test_a_live_keys_limits_come_on_top_of_its_tenants_under_its_own_scope() -> None:
    limits = KeyLimits(
        (BudgetConfig(window="day", usd=1.0), BudgetConfig(window="day", tokens=500, kind="soft")),
        RateLimitConfig(tokens_per_minute=1000),
    )
    principal = Principal(Tenant("acme"), "abcdef012345", limits=limits)
    metered = plans()
    plan = metered.for_principal(principal)
    assert plan.budgets == (
        Budget("t", "month", "usd", 10_000_000, True),
        Budget("k.abcdef012345", "day", "usd", 1_000_000, True),
        Budget("k.abcdef012345", "day", "tok", 500, False),
    )
    assert plan.rates == (RateLimit("t", "requests", 60), RateLimit("k.abcdef012345", "tokens", 1000))
    assert metered.for_principal(principal) is plan  # built once per key


def test_a_live_key_without_limits_has_its_tenants_plan() -> None:
    metered = plans()
    plain = metered.for_principal(Principal(Tenant("acme"), "abcdef012345"))
    assert plain == metered.for_principal(Principal(Tenant("acme"), "999999999999"))
    assert [b.scope for b in plain.budgets] == ["t"]
