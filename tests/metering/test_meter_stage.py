"""The meter stage and the settle finisher in process, against a store that records what it
is asked: the counters a request reserves on follow the day, the settle spends on the
counters that were reserved, and the x-ratelimit-* headers pick the tightest limit."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.config import StateConfig
from gateway.exchange import Attempt, Candidate, Endpoint, Exchange, Principal, Tenant, Usage
from gateway.keys import hash_key, key_id
from gateway.metering.meter import Meter
from gateway.metering.plan import MeterPlans, RateLimit
from gateway.metering.prices import Price, PriceBook
from gateway.metering.records import RateState, ReserveOutcome, ReserveRequest, Settlement
from gateway.metering.refusals import duration, rate_headers
from gateway.metering.settle import Settle
from tests.servers import gateway_config

KEY = "tg-meter-stage-key"


class RecordingStore:
    name = "recording"

    def __init__(self) -> None:
        self.reserved: list[ReserveRequest] = []
        self.settled: list[Settlement] = []

    async def reserve(self, request: ReserveRequest) -> ReserveOutcome:
        self.reserved.append(request)
        return ReserveOutcome(
            True,
            tuple(b.amount for b in request.budgets),
            tuple(RateState(r.per_minute, r.per_minute - r.cost, 1.0, 0.0) for r in request.rates),
        )

    async def settle(self, settlement: Settlement) -> bool:
        self.settled.append(settlement)
        return True


class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


def parts(clock: Clock) -> tuple[RecordingStore, Meter, Settle, Principal]:
    config = gateway_config(
        upstreams={"u": {"kind": "openai_compat", "base_url": "http://127.0.0.1:1/v1"}},
        models={"chat": [{"upstream": "u", "model": "m1"}, {"upstream": "u", "model": "m2"}]},
        tenants={
            "acme": {
                "budgets": [{"window": "day", "usd": 100}, {"window": "month", "tokens": 10**9}],
                "rate_limits": {"requests_per_minute": 1000, "tokens_per_minute": 10**8},
            }
        },
        keys=[{"tenant": "acme", "hash": hash_key(KEY)}],
        prices={"m1": {"input": 1.0, "output": 2.0}, "m2": {"input": 3.0, "output": 1.0}},
    )
    store = RecordingStore()
    prices = PriceBook.from_config(config.prices)
    routes = {alias: [Candidate(c.upstream, c.model) for c in cs] for alias, cs in config.models.items()}
    state = StateConfig()
    meter = Meter(store, MeterPlans(config), prices, routes, config.metering, state, clock=clock)  # type: ignore[arg-type]
    settle = Settle(store, prices, config.metering, state)  # type: ignore[arg-type]
    return store, meter, settle, Principal(Tenant("acme"), key_id(hash_key(KEY)))


def exchange(principal: Principal) -> Exchange:
    messages = [{"role": "user", "content": "x" * 300}]
    body: dict[str, Any] = {"model": "chat", "messages": messages, "max_tokens": 50}
    now = time.monotonic()
    return Exchange("r", Endpoint.CHAT, now, now + 30, {}, b"", body, principal=principal, model_alias="chat")


async def test_counters_follow_the_day_and_settle_spends_on_those_reserved() -> None:
    clock = Clock(datetime(2026, 11, 30, 23, 59, tzinfo=UTC))
    store, meter, settle, principal = parts(clock)
    first, second = exchange(principal), exchange(principal)
    await meter(first)
    await meter(second)
    clock.at += timedelta(minutes=2)  # a new day (and month) starts before the first settles
    third = exchange(principal)
    await meter(third)
    day1 = [c.counter for c in store.reserved[0].budgets]
    assert day1 == ["t:day:2026-11-30:usd", "t:month:2026-11:tok"]
    assert [c.counter for c in store.reserved[1].budgets] == day1
    assert [c.counter for c in store.reserved[2].budgets] == ["t:day:2026-12-01:usd", "t:month:2026-12:tok"]
    # The bound is priced at the worst price among the candidates: input 3, output 2 per million.
    charge = store.reserved[0].budgets[0]
    assert charge.amount == Price(3_000_000, 3_000_000, 2_000_000).cost_micros(
        first.meter.input_tokens if first.meter else 0, 0, 50
    )
    for done in (first, third):
        done.attempts.append(Attempt("u", "m1", 0.0, status=200))
        done.usage = Usage(100, 10, 0, 0, True)
        done.status = 200
        await settle.finish(done)
    assert [s[0] for s in store.settled[0].spent] == day1
    assert store.settled[0].spent[0][1] == Price(1_000_000, 1_000_000, 2_000_000).cost_micros(100, 0, 10)
    assert store.settled[0].spent[1][1] == 110
    assert [s[0] for s in store.settled[1].spent] == ["t:day:2026-12-01:usd", "t:month:2026-12:tok"]
    assert len({r.reservation_id for r in store.reserved}) == 3
    assert all(len(r.reservation_id) == 32 for r in store.reserved)


def reference_rate_headers(limits: list[RateLimit], states: list[RateState]) -> dict[str, str]:
    """The first implementation, kept as the specification."""
    headers: dict[str, str] = {}
    for unit in ("requests", "tokens"):
        pairs = [(lim, s) for lim, s in zip(limits, states, strict=True) if lim.unit == unit]
        if not pairs:
            continue
        _, state = min(pairs, key=lambda pair: (pair[1].remaining, -pair[1].reset_s))
        headers[f"x-ratelimit-limit-{unit}"] = str(state.per_minute)
        headers[f"x-ratelimit-remaining-{unit}"] = str(state.remaining)
        headers[f"x-ratelimit-reset-{unit}"] = duration(state.reset_s)
    return headers


limit_and_state = st.tuples(
    st.sampled_from(["requests", "tokens"]),
    st.integers(1, 5),
    st.integers(0, 5),
    st.sampled_from([0.0, 0.5, 1.0, 30.0, 60.0]),
)


@given(st.lists(limit_and_state, max_size=5))
def test_rate_headers_pick_the_tightest_limit_as_specified(rows: list[tuple[str, int, int, float]]) -> None:
    limits = [RateLimit(f"s{i}", unit, per) for i, (unit, per, _, _) in enumerate(rows)]  # type: ignore[arg-type]
    states = [RateState(per, remaining, reset, 0.0) for _, per, remaining, reset in rows]
    assert rate_headers(limits, states) == reference_rate_headers(limits, states)


def test_the_worst_price_is_the_same_asked_twice() -> None:
    book = PriceBook({"a": Price(1, 1, 9), "b": Price(4, 0, 2)})
    assert book.worst(["a", "b"]) == Price(4, 1, 9)
    assert book.worst(m for m in ("a", "b")) == Price(4, 1, 9)
    assert book.worst(["b"]) == Price(4, 0, 2)
    assert book.worst(["zzz"]) is None
    assert book.worst(["zzz"]) is None
