"""Metering through the real gateway (in-process uvicorn, SQLite store in a temporary
directory), the real simulator and the real openai client: budgets, clamping, rate limits,
idempotency, settling streams cut short, the ledger and the admin endpoint."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from adapters.state.sqlite import SQLiteStore
from gateway.keys import hash_key
from gateway.metering.records import SpendRow
from simulator import RunningSimulator
from tests.harness import eventually, openai_error, openai_upstream, recorded
from tests.metering.redis_cluster import Cluster
from tests.servers import RunningGateway, gateway_config, running_gateway

pytestmark = pytest.mark.usefixtures("one_budget_day")

ADMIN_TOKEN = "tg-admin-operator-token"
KEYS = {name: f"tg-test-{name}" for name in ("capped", "limited", "free", "streamer", "tiny")}
# Expensive on purpose, so that small budgets are used up in a few requests: per token,
# 1,000 micro-dollars in, 100 cached, 2,000 out.
SIM_PRICE = {"input": 1000, "cached_input": 100, "output": 2000}


def today() -> str:
    return datetime.now(UTC).date().isoformat()


def metered_config(sim: RunningSimulator, paced: RunningSimulator, state: dict[str, Any]) -> Any:
    return gateway_config(
        upstreams={
            "local": openai_upstream(sim.openai_base_url(0)),
            "backup": openai_upstream(sim.openai_base_url(1)),
            "paced": openai_upstream(paced.openai_base_url(0)),
        },
        models={
            "chat": [{"upstream": "local", "model": "sim-model"}],
            "failover": [
                {"upstream": "local", "model": "sim-model"},
                {"upstream": "backup", "model": "sim-model"},
            ],
            "paced": [{"upstream": "paced", "model": "sim-model"}],
        },
        tenants={
            "capped": {"budgets": [{"window": "day", "usd": 0.05}]},
            "limited": {"rate_limits": {"requests_per_minute": 3, "tokens_per_minute": 100_000}},
            "free": {},
            "streamer": {"budgets": [{"window": "month", "usd": 100, "tokens": 1_000_000}]},
            "tiny": {"budgets": [{"window": "day", "tokens": 50}]},
        },
        keys=[{"tenant": name, "hash": hash_key(key)} for name, key in KEYS.items()],
        prices={"sim-model": SIM_PRICE},
        state=state,
        admin={"tokens": [hash_key(ADMIN_TOKEN)]},
    )


@pytest.fixture(scope="module")
def state_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("metering") / "state.db"


@pytest.fixture(scope="module")
def metered(
    upstream_sim: RunningSimulator, paced_sim: RunningSimulator, state_path: Path
) -> Iterator[RunningGateway]:
    config = metered_config(upstream_sim, paced_sim, {"store": "sqlite", "sqlite_path": str(state_path)})
    with running_gateway(config) as running:
        yield running


@pytest.fixture
async def store(state_path: Path) -> AsyncIterator[SQLiteStore]:
    """The gateway's store file, opened beside it, as another process would."""
    opened = SQLiteStore(state_path)
    yield opened
    await opened.aclose()


def client_for(gateway: RunningGateway, tenant: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=KEYS[tenant], max_retries=0)


def post(gateway: RunningGateway, tenant: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    auth = {"authorization": f"Bearer {KEYS[tenant]}", **headers}
    return httpx.post(gateway.base_url + "/chat/completions", json=body, headers=auth, timeout=30)


def hello(model: str = "chat", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}], **extra}


async def spend_of(store: SQLiteStore, tenant: str) -> list[SpendRow]:
    return await store.spend((tenant,), today(), today())


async def test_a_hard_budget_lowers_max_tokens_to_what_it_covers_then_refuses(
    metered: RunningGateway, upstream_sim: RunningSimulator, store: SQLiteStore
) -> None:
    # $0.05 = 50,000 micro-dollars. The input bound of `hello` is 12 tokens (36 bytes / 3):
    # 12,000 in, leaving 38,000 for output at 2,000 a token: 19 tokens, not the 100 asked.
    first = post(metered, "capped", hello(max_tokens=100), **{"x-request-id": "capped-1"})
    assert first.status_code == 200, first.text
    assert first.headers["x-tollgate-max-tokens-clamped"] == "19"
    assert first.headers["x-tollgate-max-tokens"] == "19; reason=budget"
    [sent] = recorded(upstream_sim, "capped-1")
    assert sent.body["max_tokens"] == 19
    usage = first.json()["usage"]
    expected = usage["prompt_tokens"] * 1000 + usage["completion_tokens"] * 2000
    [row] = await spend_of(store, "capped")
    assert row.cost_micros == expected
    # What is left cannot cover even the input: OpenAI's insufficient_quota.
    second = post(metered, "capped", hello(max_tokens=100), **{"x-request-id": "capped-2"})
    error = openai_error(second, 429)
    assert error["code"] == "insufficient_quota"
    assert error["type"] == "insufficient_quota"
    assert "daily budget of tenant 'capped'" in error["message"]
    assert recorded(upstream_sim, "capped-2") == []
    assert await store.counters("capped", (f"t:day:{today()}:usd",)) == (expected,)
    assert await store.open_reservations("capped") == 0


def test_every_output_cap_the_client_sent_is_clamped(
    metered: RunningGateway, upstream_sim: RunningSimulator
) -> None:
    # 50 tokens a day: 12 of input bound, so at most 38 output tokens, whichever parameter
    # the upstream honours.
    body = hello(max_completion_tokens=500, max_tokens=300)
    response = post(metered, "tiny", body, **{"x-request-id": "tiny-1"})
    assert response.status_code == 200, response.text
    [sent] = recorded(upstream_sim, "tiny-1")
    assert (sent.body["max_completion_tokens"], sent.body["max_tokens"]) == (38, 38)
    assert response.headers["x-tollgate-max-tokens-clamped"] == "38"


def test_rate_limits_show_in_headers_and_refuse_with_retry_after(metered: RunningGateway) -> None:
    with client_for(metered, "limited") as client:
        remaining = []
        for _ in range(3):
            raw = client.chat.completions.with_raw_response.create(model="chat", messages=hello()["messages"])
            assert raw.headers["x-ratelimit-limit-requests"] == "3"
            assert raw.headers["x-ratelimit-limit-tokens"] == "100000"
            assert raw.headers["x-ratelimit-reset-requests"].endswith("s")
            remaining.append(raw.headers["x-ratelimit-remaining-requests"])
        assert remaining == ["2", "1", "0"]
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="chat", messages=hello()["messages"])
    response = refused.value.response
    assert refused.value.code == "rate_limit_exceeded"
    assert response.json()["error"]["type"] == "requests"
    assert int(response.headers["retry-after"]) >= 1
    assert response.headers["x-ratelimit-remaining-requests"] == "0"
    assert "x-ratelimit-remaining-tokens" in response.headers


def test_a_request_larger_than_the_tokens_per_minute_limit_is_refused_as_such(
    metered: RunningGateway,
) -> None:
    response = post(metered, "limited", hello(max_tokens=200_000))
    error = openai_error(response, 429)
    assert error["code"] == "rate_limit_exceeded"
    assert error["message"].startswith("Request too large for tokens per minute")


async def test_a_repeated_idempotency_key_replays_without_a_new_call_or_charge(
    metered: RunningGateway, upstream_sim: RunningSimulator, store: SQLiteStore
) -> None:
    messages = hello()["messages"]
    extra = {"x_sim": {"reply": "only once"}}
    with client_for(metered, "free") as client:
        first = client.chat.completions.with_raw_response.create(
            model="chat",
            messages=messages,
            extra_body=extra,
            extra_headers={"Idempotency-Key": "order-42", "x-request-id": "idem-1"},
        )
        again = client.chat.completions.with_raw_response.create(
            model="chat",
            messages=messages,
            extra_body=extra,
            extra_headers={"Idempotency-Key": "order-42", "x-request-id": "idem-2"},
        )
    assert again.parse().model_dump() == first.parse().model_dump()
    assert again.headers["idempotent-replayed"] == "true"
    assert len(recorded(upstream_sim, "idem-1")) == 1
    assert recorded(upstream_sim, "idem-2") == []
    [row] = await spend_of(store, "free")
    assert row.requests == 1
    other = post(metered, "free", hello(x_sim={"reply": "different"}), **{"idempotency-key": "order-42"})
    assert openai_error(other, 400)["code"] == "idempotency_key_reused"


def test_a_repeat_while_the_first_is_in_flight_gets_409(
    metered: RunningGateway, paced_sim: RunningSimulator
) -> None:
    paced_sim.clear()
    body = hello("paced", x_sim={"reply": " ".join(["word"] * 30)})
    first: list[httpx.Response] = []
    thread = threading.Thread(
        target=lambda: first.append(post(metered, "free", body, **{"idempotency-key": "slow"}))
    )
    thread.start()
    try:
        assert eventually(lambda: len(paced_sim.requests) == 1)
        conflict = post(metered, "free", body, **{"idempotency-key": "slow"})
        assert openai_error(conflict, 409)["code"] == "idempotency_key_in_use"
    finally:
        thread.join(30)
    assert first[0].status_code == 200
    replay = post(metered, "free", body, **{"idempotency-key": "slow"})
    assert replay.json() == first[0].json()
    assert len(paced_sim.requests) == 1


def test_a_failed_request_releases_its_idempotency_key(metered: RunningGateway) -> None:
    failing = hello(x_sim={"fault": {"status": 400, "message": "bad"}})
    assert post(metered, "free", failing, **{"idempotency-key": "retry-me"}).status_code == 400
    assert post(metered, "free", failing, **{"idempotency-key": "retry-me"}).status_code == 400  # not 409


def test_a_malformed_idempotency_key_is_refused_clearly(metered: RunningGateway) -> None:
    response = post(metered, "free", hello(), **{"idempotency-key": "x" * 300})
    assert openai_error(response, 400)["code"] == "invalid_idempotency_key"


async def test_a_stream_cut_mid_way_is_not_retried_and_is_settled_with_what_was_produced(
    metered: RunningGateway, upstream_sim: RunningSimulator, store: SQLiteStore
) -> None:
    upstream_sim.clear()
    fault = {"x_sim": {"fault": {"kind": "disconnect", "after_chunks": 4}}}
    with client_for(metered, "streamer") as client:
        stream = client.chat.completions.create(
            model="failover",
            messages=hello()["messages"],
            stream=True,
            extra_body=fault,
            extra_headers={"x-request-id": "cut-1"},
        )
        pieces = []
        with pytest.raises(openai.APIError):
            for chunk in stream:
                pieces.extend(c.delta.content or "" for c in chunk.choices)
    assert pieces  # some of the answer arrived before the cut
    assert len(recorded(upstream_sim, "cut-1")) == 1  # no retry once the stream had started
    assert await settled(store, "streamer", 1)
    [row] = await spend_of(store, "streamer")
    assert row.requests == 1
    assert row.completion_tokens >= 1  # counted from the text streamed, as no usage came
    assert row.prompt_tokens == 12  # the input bound that was reserved
    assert row.cost_micros == row.prompt_tokens * 1000 + row.completion_tokens * 2000
    assert await store.open_reservations("streamer") == 0


async def test_a_stream_the_client_abandons_is_settled_with_what_was_produced(
    metered: RunningGateway, paced_sim: RunningSimulator, store: SQLiteStore
) -> None:
    body = hello("paced", stream=True, max_tokens=200, x_sim={"reply": " ".join(["word"] * 200)})
    headers = {"authorization": f"Bearer {KEYS['streamer']}"}
    rows_before = await spend_of(store, "streamer")
    before = sum(r.completion_tokens for r in rows_before)
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream("POST", metered.base_url + "/chat/completions", json=body, headers=headers) as response,
    ):
        events = 0
        async for line in response.aiter_lines():
            events += line.startswith("data: ")
            if events == 4:
                break
    assert await settled(store, "streamer", sum(r.requests for r in rows_before) + 1)
    produced = sum(r.completion_tokens for r in await spend_of(store, "streamer")) - before
    assert 1 <= produced < 200


async def settled(store: SQLiteStore, tenant: str, requests: int, seconds: float = 10.0) -> bool:
    """Whether the tenant's ledger reaches this many requests with no reservation left open
    (the settle finisher runs after the response, so the test may see the response first)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        rows = await spend_of(store, tenant)
        if sum(r.requests for r in rows) >= requests and await store.open_reservations(tenant) == 0:
            return True
        await asyncio.sleep(0.02)
    return False


def test_the_admin_endpoint_shows_the_ledger_to_operators_only(metered: RunningGateway) -> None:
    assert post(metered, "free", hello()).status_code == 200
    url = metered.url + "/admin/spend"
    ok = httpx.get(url, params={"tenant": "free"}, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert ok.status_code == 200, ok.text
    document = ok.json()
    assert document["object"] == "spend"
    assert {row["tenant"] for row in document["data"]} == {"free"}
    assert document["total"]["requests"] >= 1
    assert document["total"]["cost_usd"] == document["total"]["cost_micros"] / 1e6
    tenant_key = httpx.get(url, headers={"authorization": f"Bearer {KEYS['free']}"})
    assert openai_error(tenant_key, 401)["code"] == "invalid_admin_token"
    assert openai_error(httpx.get(url), 401)["code"] == "missing_admin_token"
    bad = httpx.get(url, params={"since": "yesterday"}, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert openai_error(bad, 400)["message"].startswith("since must be a date")


def test_a_metered_tenant_is_refused_when_the_store_is_unreachable_unless_it_fails_open(
    upstream_sim: RunningSimulator, paced_sim: RunningSimulator
) -> None:
    from tests.harness import free_port

    state = {
        "store": "redis",
        "redis_url": f"redis://127.0.0.1:{free_port()}/0",
        "timeout_s": 0.5,
        "fail_open_tenants": ["streamer"],
    }
    with running_gateway(metered_config(upstream_sim, paced_sim, state)) as gateway:
        refused = post(gateway, "capped", hello())
        error = openai_error(refused, 503)
        assert error["code"] == "state_store_unavailable"
        assert "Redis at 127.0.0.1" in error["message"]
        assert post(gateway, "streamer", hello()).status_code == 200  # fails open
        assert post(gateway, "free", hello()).status_code == 200  # not metered: only its ledger row is lost


def test_a_metered_request_without_an_output_cap_gets_the_default_one_upstream(
    metered: RunningGateway, upstream_sim: RunningSimulator
) -> None:
    response = post(metered, "streamer", hello(), **{"x-request-id": "default-cap"})
    assert response.status_code == 200
    [sent] = recorded(upstream_sim, "default-cap")
    assert sent.body["max_tokens"] == 4096  # metering.default_max_tokens: the bound that was reserved
    assert response.headers["x-tollgate-max-tokens"] == "4096; reason=default"
    asked = post(metered, "streamer", hello(max_tokens=50))
    assert "x-tollgate-max-tokens" not in asked.headers  # the client's own limit, untouched
    assert "x-tollgate-max-tokens-clamped" not in response.headers


def test_an_unmetered_tenants_request_goes_upstream_as_sent(
    metered: RunningGateway, upstream_sim: RunningSimulator
) -> None:
    response = post(metered, "free", hello(), **{"x-request-id": "as-sent"})
    assert response.status_code == 200
    [sent] = recorded(upstream_sim, "as-sent")
    assert "max_tokens" not in sent.body
    assert not any(name.startswith("x-ratelimit") for name in response.headers)


def test_a_gateway_on_a_redis_cluster_meters_on_the_tenants_node(
    upstream_sim: RunningSimulator, paced_sim: RunningSimulator, cluster: Cluster
) -> None:
    prefix = f"tgc-{uuid.uuid4().hex[:8]}"
    state = {"store": "redis", "redis_url": cluster.url, "redis_cluster": True, "key_prefix": prefix}
    with running_gateway(metered_config(upstream_sim, paced_sim, state)) as gateway:
        statuses = []
        for _ in range(20):  # "tiny" has 50 tokens a day
            statuses.append(post(gateway, "tiny", hello()).status_code)
            if statuses[-1] != 200:
                break
        assert statuses[0] == 200 and statuses[-1] == 429
        owner = cluster.owner("tiny")
        assert cluster.keys(owner, f"{prefix}:{{tiny}}:c:*")
        assert all(not cluster.keys(port, f"{prefix}:*") for port in cluster.ports if port != owner)
