"""The StateStore contract, run against both adapters: the same calls, the same answers."""

from __future__ import annotations

import asyncio
import uuid

from gateway.metering.records import (
    BudgetCharge,
    LedgerEntry,
    RateCharge,
    ReserveRequest,
    Settlement,
    StoredResponse,
)
from gateway.ports import StateStore

EXPIRES = 4_102_444_800  # 2100-01-01: counters of these tests never age out while they run


def budget(amount: int, limit: int, hard: bool = True, counter: str = "t:day:2026-11-22:usd") -> BudgetCharge:
    return BudgetCharge(counter, amount, limit, hard, EXPIRES)


def reserve_request(
    *budgets: BudgetCharge, rates: tuple[RateCharge, ...] = (), tenant: str = "acme", lease_s: float = 60
) -> ReserveRequest:
    return ReserveRequest(tenant, uuid.uuid4().hex, tuple(budgets), rates, lease_s)


def settlement(
    request: ReserveRequest,
    spent: int,
    *,
    refunds: tuple[RateCharge, ...] = (),
    ledger: LedgerEntry | None = None,
) -> Settlement:
    return Settlement(
        request.tenant,
        request.reservation_id,
        tuple((b.counter, spent, EXPIRES) for b in request.budgets),
        refunds,
        ledger,
        keep_s=600,
    )


async def test_a_hard_budget_admits_what_fits_and_refuses_the_rest_unchanged(store: StateStore) -> None:
    first = await store.reserve(reserve_request(budget(600, 1000)))
    assert first.admitted
    assert first.used == (600,)
    second = await store.reserve(reserve_request(budget(500, 1000)))
    assert not second.admitted
    assert second.used == (600,)  # what was used before; nothing taken
    third = await store.reserve(reserve_request(budget(400, 1000)))
    assert third.admitted
    assert third.used == (1000,)


async def test_a_soft_budget_counts_but_never_refuses(store: StateStore) -> None:
    outcome = await store.reserve(reserve_request(budget(1500, 1000, hard=False)))
    assert outcome.admitted
    assert outcome.used == (1500,)


async def test_refusal_takes_nothing_from_any_limit(store: StateStore) -> None:
    rpm = RateCharge("t:rpm", 1, 2)
    refused = await store.reserve(reserve_request(budget(2000, 1000), rates=(rpm,)))
    assert not refused.admitted
    assert refused.rates[0].remaining == 2  # the refused request took no request from the limit
    admitted = await store.reserve(reserve_request(budget(10, 1000), rates=(rpm,)))
    assert admitted.admitted
    assert admitted.rates[0].remaining == 1


async def test_requests_per_minute_admits_a_burst_up_to_the_limit_then_says_when_to_retry(
    store: StateStore,
) -> None:
    rpm = RateCharge("t:rpm", 1, 3)
    remaining = []
    for _ in range(3):
        outcome = await store.reserve(reserve_request(rates=(rpm,)))
        assert outcome.admitted
        remaining.append(outcome.rates[0].remaining)
    assert remaining == [2, 1, 0]
    assert 0 < outcome.rates[0].reset_s <= 60
    refused = await store.reserve(reserve_request(rates=(rpm,)))
    assert not refused.admitted
    state = refused.rates[0]
    assert state.per_minute == 3
    assert state.remaining == 0
    assert 0 < state.retry_after_s <= 20  # one request's worth of the window: 60 s / 3


async def test_a_request_refused_by_the_key_limit_takes_nothing_from_the_tenant_limit(
    store: StateStore,
) -> None:
    tenant_rpm, key_rpm = RateCharge("t:rpm", 1, 10), RateCharge("k.abc:rpm", 1, 1)
    assert (await store.reserve(reserve_request(rates=(tenant_rpm, key_rpm)))).admitted
    refused = await store.reserve(reserve_request(rates=(tenant_rpm, key_rpm)))
    assert not refused.admitted
    assert refused.rates[0].remaining == 9
    assert refused.rates[1].retry_after_s > 0


async def test_unused_tokens_given_back_at_settle_are_available_again(store: StateStore) -> None:
    tpm = RateCharge("t:tpm", 100, 150)
    first = reserve_request(rates=(tpm,))
    assert (await store.reserve(first)).admitted
    assert not (await store.reserve(reserve_request(rates=(tpm,)))).admitted
    assert await store.settle(settlement(first, 0, refunds=(RateCharge("t:tpm", 80, 150),)))
    again = await store.reserve(reserve_request(rates=(tpm,)))
    assert again.admitted


async def test_settle_replaces_the_reservation_with_the_actual_amount_once(store: StateStore) -> None:
    request = reserve_request(budget(700, 1000))
    assert (await store.reserve(request)).admitted
    assert await store.settle(settlement(request, 250))
    assert await store.counters("acme", ("t:day:2026-11-22:usd",)) == (250,)
    assert not await store.settle(settlement(request, 250))  # idempotent
    assert await store.counters("acme", ("t:day:2026-11-22:usd",)) == (250,)
    assert await store.open_reservations("acme") == 0


async def test_a_settle_without_a_reservation_records_the_spend_once(store: StateStore) -> None:
    request = reserve_request(budget(0, 0, hard=False))  # never reserved
    assert await store.settle(settlement(request, 40))
    assert not await store.settle(settlement(request, 40))
    assert await store.counters("acme", ("t:day:2026-11-22:usd",)) == (40,)


async def test_a_release_gives_back_the_budgets_and_rate_limits_its_reservation_took(
    store: StateStore,
) -> None:
    # The reserve of a request refused for want of an answer, applied after all: released.
    rpm = RateCharge("t:rpm", 1, 1)
    request = reserve_request(budget(300, 1000), rates=(rpm,))
    assert (await store.reserve(request)).admitted
    released = Settlement(request.tenant, request.reservation_id, (), (), None, keep_s=600, release=True)
    assert await store.settle(released)
    assert await store.counters("acme", ("t:day:2026-11-22:usd",)) == (0,)
    assert await store.open_reservations("acme") == 0
    assert (await store.reserve(reserve_request(rates=(rpm,)))).admitted  # its one request a minute


async def test_a_reserve_arriving_after_its_release_takes_nothing(store: StateStore) -> None:
    # A reserve that timed out is released by id; the store may see the two in either order.
    request = reserve_request(budget(300, 1000), rates=(RateCharge("t:rpm", 1, 1),))
    assert await store.settle(settlement(request, 0))
    late = await store.reserve(request)
    assert not late.admitted
    assert await store.counters("acme", ("t:day:2026-11-22:usd",)) == (0,)
    assert await store.open_reservations("acme") == 0
    assert (await store.reserve(reserve_request(rates=(RateCharge("t:rpm", 1, 1),)))).admitted


async def test_a_lease_never_settled_is_released_and_a_late_settle_counts_once(store: StateStore) -> None:
    request = reserve_request(budget(900, 1000), lease_s=0.2)
    assert (await store.reserve(request)).admitted
    assert await store.open_reservations("acme") == 1
    await asyncio.sleep(0.4)
    assert await store.open_reservations("acme") == 0
    assert await store.counters("acme", ("t:day:2026-11-22:usd",)) == (0,)
    assert (await store.reserve(reserve_request(budget(900, 1000)))).used == (900,)
    assert await store.settle(settlement(request, 100))  # the answer came after all
    assert not await store.settle(settlement(request, 100))
    assert await store.counters("acme", ("t:day:2026-11-22:usd",)) == (1000,)


async def test_tenants_do_not_share_counters(store: StateStore) -> None:
    assert (await store.reserve(reserve_request(budget(1000, 1000), tenant="acme"))).admitted
    other = await store.reserve(reserve_request(budget(1000, 1000), tenant="globex"))
    assert other.admitted
    assert other.used == (1000,)


async def test_concurrent_reservations_never_pass_a_hard_budget(store: StateStore) -> None:
    outcomes = await asyncio.gather(*(store.reserve(reserve_request(budget(30, 1000))) for _ in range(100)))
    assert sum(o.admitted for o in outcomes) == 33
    assert await store.counters("acme", ("t:day:2026-11-22:usd",)) == (990,)


async def test_the_ledger_adds_up_per_day_key_and_model(store: StateStore) -> None:
    for day, model, cost in (
        ("2026-11-21", "m1", 5),
        ("2026-11-22", "m1", 7),
        ("2026-11-22", "m1", 11),
        ("2026-11-22", "m2", 13),
    ):
        entry = LedgerEntry(day, "key1", model, 100, 40, 10, cost)
        assert await store.settle(settlement(reserve_request(), 0, ledger=entry))
    other = LedgerEntry("2026-11-22", "key9", "m1", 1, 0, 1, 3)
    assert await store.settle(settlement(reserve_request(tenant="globex"), 0, ledger=other))
    rows = await store.spend(("acme",), "2026-11-22", "2026-11-22")
    assert [(r.tenant, r.day, r.key_id, r.model, r.requests, r.cost_micros) for r in rows] == [
        ("acme", "2026-11-22", "key1", "m1", 2, 18),
        ("acme", "2026-11-22", "key1", "m2", 1, 13),
    ]
    assert rows[0].prompt_tokens == 200
    assert rows[0].cached_tokens == 80
    assert rows[0].completion_tokens == 20
    both = await store.spend(("acme", "globex"), "2026-11-01", "2026-11-30")
    assert sum(r.cost_micros for r in both) == 5 + 7 + 11 + 13 + 3


async def test_an_idempotency_key_is_claimed_once_then_replays_its_response(store: StateStore) -> None:
    assert (await store.claim_idempotency("acme", "k1", "fp", 30)).state == "claimed"
    assert (await store.claim_idempotency("acme", "k1", "fp", 30)).state == "in_flight"
    assert (await store.claim_idempotency("acme", "k1", "other", 30)).state == "mismatch"
    assert (await store.claim_idempotency("globex", "k1", "fp", 30)).state == "claimed"
    await store.complete_idempotency("acme", "k1", "fp", StoredResponse(200, b'{"id":"x"}'), 30)
    done = await store.claim_idempotency("acme", "k1", "fp", 30)
    assert done.state == "done"
    assert done.response == StoredResponse(200, b'{"id":"x"}')


async def test_a_released_idempotency_key_can_be_claimed_again(store: StateStore) -> None:
    assert (await store.claim_idempotency("acme", "k2", "fp", 30)).state == "claimed"
    await store.release_idempotency("acme", "k2")
    assert (await store.claim_idempotency("acme", "k2", "fp", 30)).state == "claimed"


async def test_idempotency_claims_and_responses_expire(store: StateStore) -> None:
    assert (await store.claim_idempotency("acme", "k3", "fp", 0.2)).state == "claimed"
    await asyncio.sleep(0.35)
    assert (await store.claim_idempotency("acme", "k3", "fp", 30)).state == "claimed"
    await store.complete_idempotency("acme", "k3", "fp", StoredResponse(200, b"{}"), 0.2)
    await asyncio.sleep(0.35)
    assert (await store.claim_idempotency("acme", "k3", "fp", 30)).state == "claimed"


async def test_ping_answers_when_the_store_is_there(store: StateStore) -> None:
    await store.ping()
