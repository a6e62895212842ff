"""A replica that serves one request at a time leaves its health route waiting during a long
prefill (llama-cpp-python's server does): it is busy, not down, and keeps its sessions."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.bare_upstream import BareUpstream, bare_upstream
from tests.harness import HELLO, captured_logs, eventually
from tests.servers import TEST_KEY, RunningGateway, gateway_config, running_gateway


@pytest.fixture(scope="module")
def servers() -> Iterator[list[BareUpstream]]:
    with bare_upstream() as first, bare_upstream() as second:
        yield [first, second]


@pytest.fixture(scope="module")
def gateway(servers: list[BareUpstream]) -> Iterator[RunningGateway]:
    pool: dict[str, Any] = {
        "kind": "openai_compat",
        "replicas": [server.base_url for server in servers],
        # Probes far stricter than the defaults: one unanswered within 0.2 s would open a circuit.
        "health": {"probe_interval_s": 0.1, "probe_timeout_s": 0.2, "probe_failures": 1, "busy_grace_s": 1.0},
    }
    config = gateway_config(
        upstreams={"pool": pool},
        models={"chat": [{"upstream": "pool", "model": "m"}]},
        server={"access_log": True},
    )
    with running_gateway(config) as running:
        yield running


def _ask(gateway: RunningGateway, session: str) -> httpx.Response:
    return httpx.post(
        gateway.base_url + "/chat/completions",
        json={"model": "chat", "messages": HELLO},
        headers={"authorization": f"Bearer {TEST_KEY}", "x-session-id": session},
        timeout=30,
    )


def _home(servers: list[BareUpstream], gateway: RunningGateway, session: str) -> int:
    before = [len(s.controls.requests) for s in servers]
    assert _ask(gateway, session).status_code == 200
    [home] = [i for i, s in enumerate(servers) if len(s.controls.requests) > before[i]]
    return home


def _replicas(gateway: RunningGateway) -> list[dict[str, Any]]:
    replicas: list[dict[str, Any]] = httpx.get(gateway.url + "/readyz", timeout=10).json()["replicas"]["pool"]
    return replicas


def test_a_replica_busy_with_a_long_prefill_keeps_its_circuit_and_its_sessions(
    servers: list[BareUpstream], gateway: RunningGateway
) -> None:
    session = f"session-{uuid.uuid4().hex}"
    home = _home(servers, gateway, session)
    busy = servers[home]
    answered = len(busy.controls.requests)
    busy.controls.prefill_s = 3.0  # fifteen probes' worth of silence from its health route
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(_ask(gateway, session).status_code))
    worker.start()
    try:
        assert eventually(lambda: len(busy.controls.requests) > answered, 10)
        during = _replicas(gateway)[home]
        assert during["in_flight"] == 1
        assert during["health"] == "silent"  # the health route waits behind the prefill...
        assert during["circuit"] == "closed"  # ...and that does not make the replica down
    finally:
        worker.join(30)
        busy.controls.prefill_s = 0.0
    assert result == [200]
    assert _replicas(gateway)[home]["circuit"] == "closed"
    assert _home(servers, gateway, session) == home  # the session stayed with its cache


def test_an_idle_replica_whose_health_check_fails_is_marked_down(
    servers: list[BareUpstream], gateway: RunningGateway
) -> None:
    other = servers[1]
    other.controls.health_status = 503
    try:
        # Idle past busy_grace_s, so its failing probes count.
        assert eventually(lambda: _replicas(gateway)[1]["circuit"] == "open", 10)
        assert _replicas(gateway)[1]["last_probe"] == "down"
    finally:
        other.controls.health_status = 200
    assert eventually(lambda: _replicas(gateway)[1]["circuit"] != "open", 10)


def test_the_access_line_and_the_attempt_metrics_name_the_replica(
    servers: list[BareUpstream], gateway: RunningGateway
) -> None:
    session = f"session-{uuid.uuid4().hex}"
    with captured_logs() as logs:
        home = _home(servers, gateway, session)
        assert eventually(lambda: '"tollgate.access"' in logs.getvalue())  # written after the response
    [line] = [json.loads(x) for x in logs.getvalue().splitlines() if '"tollgate.access"' in x]
    assert (line["upstream"], line["replica"]) == ("pool", home)
    page = httpx.get(gateway.url + "/metrics").text
    replicas = {
        sample.labels["tollgate_replica"]
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name == "tollgate_upstream_attempts_total"
    }
    assert str(home) in replicas
    assert replicas <= {"0", "1"}  # the index, never an address
