"""Which budgets and limits apply to a key, and the counters their periods map to."""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.config import GatewayConfig
from gateway.exchange import Principal, Tenant
from gateway.keys import hash_key, key_id
from gateway.metering.plan import Budget, MeterPlans, Periods, RateLimit
from tests.servers import gateway_config

KEY = "tg-plan-key"


def config() -> GatewayConfig:
    return gateway_config(
        upstreams={"u": {"kind": "openai_compat", "base_url": "http://127.0.0.1:1/v1"}},
        models={"m": [{"upstream": "u", "model": "x"}]},
        tenants={
            "acme": {
                "budgets": [{"window": "month", "usd": 12.5, "tokens": 1000, "kind": "soft"}],
                "rate_limits": {"requests_per_minute": 60},
            },
            "plain": {},
        },
        keys=[
            {"tenant": "acme", "hash": hash_key(KEY), "budgets": [{"window": "day", "usd": 1}]},
            {"tenant": "plain", "hash": hash_key("tg-other")},
        ],
    )


def test_a_keys_budgets_and_limits_come_on_top_of_its_tenants() -> None:
    plans = MeterPlans(config())
    kid = key_id(hash_key(KEY))
    plan = plans.for_principal(Principal(Tenant("acme"), kid))
    assert plan.budgets == (
        Budget("t", "month", "usd", 12_500_000, False),
        Budget("t", "month", "tok", 1000, False),
        Budget(f"k.{kid}", "day", "usd", 1_000_000, True),
    )
    assert plan.rates == (RateLimit("t", "requests", 60),)
    assert plans.any_metered
    assert not plans.for_principal(Principal(Tenant("plain"), key_id(hash_key("tg-other")))).metered


def test_counters_name_their_period_and_outlive_it_by_two_days() -> None:
    periods = Periods.of(datetime(2026, 12, 31, 23, 59, tzinfo=UTC))
    day, month = Budget("t", "day", "usd", 1, True), Budget("t", "month", "tok", 1, True)
    assert day.counter(periods) == "t:day:2026-12-31:usd"
    assert month.counter(periods) == "t:month:2026-12:tok"
    assert day.expires_at(periods) == int(datetime(2027, 1, 3, tzinfo=UTC).timestamp())
    assert month.expires_at(periods) == int(datetime(2027, 1, 3, tzinfo=UTC).timestamp())
    february = Periods.of(datetime(2026, 2, 3, tzinfo=UTC))
    assert month.expires_at(february) == int(datetime(2026, 3, 3, tzinfo=UTC).timestamp())
