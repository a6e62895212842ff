"""Idempotency-Key on a gateway with no metering (no `state:` block, no budgets): still
honoured, on the embedded store that is opened when the first key arrives."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from simulator import RunningSimulator
from tests.harness import HELLO, eventually, openai_error, openai_upstream, recorded
from tests.servers import TEST_KEY, RunningGateway, gateway_config, running_gateway


@pytest.fixture
def unmetered(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    upstream_sim: RunningSimulator,
    paced_sim: RunningSimulator,
) -> Iterator[RunningGateway]:
    monkeypatch.chdir(tmp_path)  # the embedded store's file is relative to the working directory
    config = gateway_config(
        upstreams={
            "local": openai_upstream(upstream_sim.openai_base_url(0)),
            "paced": openai_upstream(paced_sim.openai_base_url(0)),
        },
        models={
            "chat": [{"upstream": "local", "model": "sim-model"}],
            "paced": [{"upstream": "paced", "model": "sim-model"}],
        },
    )
    assert config.state is None
    with running_gateway(config) as running:
        yield running


def post(gateway: RunningGateway, body: dict[str, object], **headers: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {TEST_KEY}", **headers},
        timeout=30,
    )


def test_a_repeat_is_replayed_without_a_second_upstream_call(
    unmetered: RunningGateway, upstream_sim: RunningSimulator, tmp_path: Path
) -> None:
    body = {"model": "chat", "messages": HELLO, "x_sim": {"reply": "just once"}}
    first = post(unmetered, body, **{"idempotency-key": "order-7", "x-request-id": "unmetered-1"})
    again = post(unmetered, body, **{"idempotency-key": "order-7", "x-request-id": "unmetered-2"})
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert len(recorded(upstream_sim, "unmetered-1")) == 1
    assert recorded(upstream_sim, "unmetered-2") == []
    assert (tmp_path / "tollgate-state.db").exists()
    reused = post(unmetered, {**body, "x_sim": {"reply": "other"}}, **{"idempotency-key": "order-7"})
    assert openai_error(reused, 400)["code"] == "idempotency_key_reused"


def test_a_request_without_a_key_opens_no_store(unmetered: RunningGateway, tmp_path: Path) -> None:
    assert post(unmetered, {"model": "chat", "messages": HELLO}).status_code == 200
    assert not (tmp_path / "tollgate-state.db").exists()


def test_a_repeat_while_the_first_is_in_flight_gets_409(
    unmetered: RunningGateway, paced_sim: RunningSimulator
) -> None:
    paced_sim.clear()
    body = {"model": "paced", "messages": HELLO, "x_sim": {"reply": " ".join(["word"] * 30)}}
    first: list[httpx.Response] = []
    thread = threading.Thread(
        target=lambda: first.append(post(unmetered, body, **{"idempotency-key": "slow"}))
    )
    thread.start()
    try:
        assert eventually(lambda: len(paced_sim.requests) == 1)
        conflict = post(unmetered, body, **{"idempotency-key": "slow"})
        assert openai_error(conflict, 409)["code"] == "idempotency_key_in_use"
    finally:
        thread.join(30)
    assert first[0].status_code == 200
    assert post(unmetered, body, **{"idempotency-key": "slow"}).json() == first[0].json()
    assert len(paced_sim.requests) == 1


def test_a_failed_request_releases_its_key(unmetered: RunningGateway, upstream_sim: RunningSimulator) -> None:
    body = {"model": "chat", "messages": HELLO, "x_sim": "the simulator refuses this with 400"}
    refused = post(unmetered, body, **{"idempotency-key": "retry-me", "x-request-id": "release-1"})
    again = post(unmetered, body, **{"idempotency-key": "retry-me", "x-request-id": "release-2"})
    assert refused.status_code == again.status_code == 400
    assert "idempotent-replayed" not in again.headers
    assert len(recorded(upstream_sim, "release-1")) == len(recorded(upstream_sim, "release-2")) == 1
