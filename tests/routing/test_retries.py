"""Retries and fallback through the gateway, with faults from the simulator: another replica of
the same pool first, then the next candidate; Retry-After; never once the client has a byte."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from simulator import RunningSimulator
from tests.harness import HELLO, chat_body, eventually, openai_error, openai_upstream, recorded
from tests.routing.conftest import REPLICAS
from tests.servers import TEST_KEY, UPSTREAM_KEY, RunningGateway, gateway_config, running_gateway

WAI_PATH = "/client/v4/accounts/acct-1/ai/v1/chat/completions"
UNAVAILABLE = {"status": 503, "message": "replica overloaded"}


def _pool(sim: RunningSimulator, **extra: Any) -> dict[str, Any]:
    upstream = openai_upstream(sim.openai_base_url(0), **extra)
    del upstream["base_url"]
    return {**upstream, "replicas": [sim.openai_base_url(i) for i in range(REPLICAS)]}


@pytest.fixture(scope="module")
def gateway(pool_sim: RunningSimulator) -> Iterator[RunningGateway]:
    never_open = {"failure_threshold": 1000, "probe_interval_s": 0}  # these tests are about retries
    config = gateway_config(
        upstreams={
            "pool": _pool(pool_sim, health=never_open),
            "impatient-pool": _pool(pool_sim, health=never_open, timeouts={"first_byte_s": 0.3}),
            "single": openai_upstream(pool_sim.openai_base_url(2), health=never_open),
            "single-quick-heads": openai_upstream(
                pool_sim.openai_base_url(2), health=never_open, timeouts={"response_headers_s": 0.5}
            ),
            "wai": {
                "kind": "workers_ai",
                "account_id": "acct-1",
                "api_token": UPSTREAM_KEY,
                "base_url": pool_sim.workers_ai_base_url,
                "reject_if_busy": True,
                "health": never_open,
            },
        },
        models={
            "pool": [{"upstream": "pool", "model": "sim-model"}],
            "impatient": [{"upstream": "impatient-pool", "model": "sim-model"}],
            "single": [{"upstream": "single", "model": "single-model"}],
            "single-then-pool": [
                {"upstream": "single", "model": "single-model"},
                {"upstream": "pool", "model": "pool-model"},
            ],
            "hung-then-pool": [
                {"upstream": "single-quick-heads", "model": "single-model"},
                {"upstream": "pool", "model": "pool-model"},
            ],
            "kimi": [
                {"upstream": "wai", "model": "@cf/moonshotai/kimi-k2.6"},
                {"upstream": "pool", "model": "self-hosted-kimi"},
            ],
        },
    )
    with running_gateway(config) as running:
        yield running


@pytest.fixture(scope="module")
def client(gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as oai:
        yield oai


@pytest.fixture(scope="module")
def http(gateway: RunningGateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, headers={"authorization": f"Bearer {TEST_KEY}"}) as raw:
        yield raw


@pytest.fixture
def session() -> str:
    return f"session-{uuid.uuid4().hex}"


def _ask(
    client: openai.OpenAI, model: str, session: str, stream: bool = False, **extra: Any
) -> tuple[str, str]:
    """(request id, model that answered) for one chat request of `session`."""
    request_id = f"test-{uuid.uuid4().hex}"
    headers = {"x-request-id": request_id, "x-session-id": session}
    response: Any = client.chat.completions.create(
        model=model, messages=HELLO, stream=stream, extra_headers=headers, **extra
    )
    models = {chunk.model for chunk in response} if stream else {response.model}
    [answered] = models
    return request_id, answered


def _attempts(sim: RunningSimulator, request_id: str) -> list[tuple[int, int | None]]:
    return [(r.replica, r.status) for r in recorded(sim, request_id)]


def _home(client: openai.OpenAI, sim: RunningSimulator, model: str, session: str) -> int:
    request_id, _ = _ask(client, model, session)
    [(replica, status)] = _attempts(sim, request_id)
    assert status == 200
    return replica


@pytest.mark.parametrize("stream", [False, True])
def test_workers_ai_out_of_capacity_falls_back_to_the_pool(
    client: openai.OpenAI, sim: RunningSimulator, session: str, stream: bool
) -> None:
    sim.faults.set({"status": 429, "code": 3040}, count=1, replica=0)
    request_id, model = _ask(client, "kimi", session, stream)
    assert model == "self-hosted-kimi"
    attempts = recorded(sim, request_id)
    assert [(r.path, r.status) for r in attempts] == [(WAI_PATH, 429), ("/v1/chat/completions", 200)]
    assert attempts[0].body["options"] == {"rejectIfBusy": True}


@pytest.mark.parametrize("stream", [False, True])
def test_a_failing_replica_is_retried_on_another_of_the_pool(
    client: openai.OpenAI, sim: RunningSimulator, session: str, stream: bool
) -> None:
    home = _home(client, sim, "pool", session)
    sim.faults.set(UNAVAILABLE, count=1, replica=home)
    request_id, _ = _ask(client, "pool", session, stream)
    [(first, failed), (second, ok)] = _attempts(sim, request_id)
    assert (first, failed, ok) == (home, 503, 200)
    assert second != home
    assert _home(client, sim, "pool", session) == home  # the fault is spent: back home


def test_a_replica_that_refuses_connections_is_retried_on_another(
    client: openai.OpenAI, sim: RunningSimulator, session: str
) -> None:
    home = _home(client, sim, "pool", session)
    sim.faults.down(home)
    request_id, _ = _ask(client, "pool", session)
    [(replica, status)] = _attempts(sim, request_id)  # the refused attempt never reached a server
    assert replica != home
    assert status == 200


def test_retries_are_bounded_and_each_on_a_different_replica(
    http: httpx.Client, sim: RunningSimulator, session: str
) -> None:
    sim.faults.set(UNAVAILABLE)  # every replica, every request
    request_id = f"test-{uuid.uuid4().hex}"
    response = http.post(
        "/v1/chat/completions",
        json=chat_body("pool"),
        headers={"x-request-id": request_id, "x-session-id": session},
    )
    assert openai_error(response, 503)["code"] == "upstream_unavailable"
    attempts = _attempts(sim, request_id)
    assert [status for _, status in attempts] == [503, 503, 503]  # 1 + retries (2)
    assert len({replica for replica, _ in attempts}) == 3


def test_a_request_the_upstream_rejects_is_not_retried(
    http: httpx.Client, sim: RunningSimulator, session: str
) -> None:
    sim.faults.set({"status": 400, "message": "temperature is out of range"})
    request_id = f"test-{uuid.uuid4().hex}"
    response = http.post(
        "/v1/chat/completions",
        json=chat_body("pool"),
        headers={"x-request-id": request_id, "x-session-id": session},
    )
    assert openai_error(response, 400)["code"] == "upstream_rejected"
    assert [status for _, status in _attempts(sim, request_id)] == [400]


def test_retry_after_is_waited_out_when_nothing_else_is_left(
    client: openai.OpenAI, sim: RunningSimulator, session: str
) -> None:
    sim.faults.set({"status": 429, "retry_after": 0.2}, count=1, replica=2)
    request_id, model = _ask(client, "single", session)
    assert model == "single-model"
    assert _attempts(sim, request_id) == [(2, 429), (2, 200)]


def test_a_fallback_is_preferred_to_waiting_out_retry_after(
    client: openai.OpenAI, sim: RunningSimulator, session: str
) -> None:
    sim.faults.set({"status": 429, "retry_after": 0.2}, count=1, replica=2)
    request_id, model = _ask(client, "single-then-pool", session)
    assert model == "pool-model"
    assert [status for _, status in _attempts(sim, request_id)] == [429, 200]


def test_a_retry_after_longer_than_the_gateway_waits_goes_to_the_client(
    http: httpx.Client, sim: RunningSimulator
) -> None:
    sim.faults.set({"status": 429, "retry_after": 30}, count=1, replica=2)
    request_id = f"test-{uuid.uuid4().hex}"
    response = http.post(
        "/v1/chat/completions", json=chat_body("single"), headers={"x-request-id": request_id}
    )
    assert openai_error(response, 429)["code"] == "upstream_rate_limited"
    assert response.headers["retry-after"] == "30"
    assert _attempts(sim, request_id) == [(2, 429)]


def test_a_stream_cut_after_its_first_chunk_is_not_retried_and_ends_in_an_error_event(
    client: openai.OpenAI, sim: RunningSimulator, session: str
) -> None:
    request_id = f"test-{uuid.uuid4().hex}"
    stream = client.chat.completions.create(
        model="pool",
        messages=HELLO,
        stream=True,
        extra_headers={"x-request-id": request_id, "x-session-id": session},
        extra_body={
            "x_sim": {"reply": "one two three four", "fault": {"kind": "disconnect", "after_chunks": 3}}
        },
    )
    received = []
    with pytest.raises(openai.APIError) as caught:
        received.extend(stream)
    assert "".join(c.choices[0].delta.content or "" for c in received) == "one two"
    assert caught.value.code == "upstream_incomplete"
    assert [status for _, status in _attempts(sim, request_id)] == [200]


def test_a_replica_slow_to_start_is_given_up_for_another(
    client: openai.OpenAI, sim: RunningSimulator, session: str
) -> None:
    home = _home(client, sim, "impatient", session)
    sim.faults.set({"kind": "slow_first_token", "delay_s": 10}, count=1, replica=home)
    request_id, _ = _ask(client, "impatient", session, stream=True)
    attempts = recorded(sim, request_id)
    assert [r.replica == home for r in attempts] == [True, False]
    assert attempts[1].status == 200
    assert eventually(lambda: attempts[0].client_disconnected)  # the gateway hung up on the slow one


def test_an_attempt_gets_only_what_remains_of_the_deadline(
    http: httpx.Client, sim: RunningSimulator, session: str
) -> None:
    sim.faults.set({"kind": "hang"})  # every replica
    request_id = f"test-{uuid.uuid4().hex}"
    response = http.post(
        "/v1/chat/completions",
        json=chat_body("pool", stream=True),
        headers={"x-request-id": request_id, "x-session-id": session, "x-request-timeout": "0.5"},
        timeout=10,
    )
    assert openai_error(response, 504)["code"] == "upstream_timeout"
    # The first attempt used up the deadline: there was no time left for a retry.
    assert len(recorded(sim, request_id)) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_hung_candidate_fails_over_once_its_response_head_is_overdue(
    client: openai.OpenAI, sim: RunningSimulator, session: str, stream: bool
) -> None:
    # A non-streamed answer's head would otherwise be waited for until the 30 s deadline.
    sim.faults.set({"kind": "hang"}, count=1, replica=2)
    request_id, model = _ask(client, "hung-then-pool", session, stream, timeout=20)
    assert model == "pool-model"
    attempts = recorded(sim, request_id)
    assert attempts[0].replica == 2
    assert attempts[-1].status == 200
    assert eventually(lambda: attempts[0].client_disconnected)  # the gateway hung up on the hung one
