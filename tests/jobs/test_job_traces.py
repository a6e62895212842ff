"""A job's attempts are spans of one trace, children of its submission's span, as a real OTLP
receiver gets them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from simulator import RunningSimulator, SimConfig, Simulator
from tests.harness import eventually
from tests.jobs.gateways import auth, jobs_config, poll_job
from tests.servers import UPSTREAM_KEY, running_gateway
from tests.telemetry.conftest import telemetry_block
from tests.telemetry.receiver import otlp_receiver


@pytest.fixture
def sim() -> Iterator[RunningSimulator]:
    running = Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY))
    yield running
    running.stop()


def test_each_attempt_is_a_span_under_the_submission(sim: RunningSimulator, tmp_path: Path) -> None:
    trace_id, client_span = os.urandom(16).hex(), os.urandom(8).hex()
    with otlp_receiver() as receiver:
        config = jobs_config(sim, tmp_path, telemetry=telemetry_block(receiver.endpoint))
        with running_gateway(config) as gateway, httpx.Client(base_url=gateway.url, timeout=30) as http:
            sim.faults.set({"status": 503}, count=1)  # the first attempt fails: two attempts
            body = {"model": "chat", "messages": [{"role": "user", "content": "trace me"}]}
            headers = {**auth(), "prefer": "respond-async", "traceparent": f"00-{trace_id}-{client_span}-01"}
            accepted = http.post("/v1/chat/completions", json=body, headers=headers)
            assert poll_job(http, accepted.headers["location"], auth()).status_code == 200

            def servers() -> list[object]:
                return [s for s in receiver.received.spans_of(trace_id) if s.kind == "SERVER"]

            assert eventually(lambda: len(servers()) >= 3, seconds=20)
        spans = receiver.received.spans_of(trace_id)
    server_spans = [s for s in spans if s.kind == "SERVER"]
    [submission] = [s for s in server_spans if s.parent_span_id == client_span]
    attempts = [s for s in server_spans if s.parent_span_id == submission.span_id]
    assert len(attempts) == 2
    assert all(s.attributes.get("tollgate.tenant") == "alpha" for s in attempts)
    clients = [s for s in spans if s.kind == "CLIENT"]
    assert len(clients) == 2  # one upstream call per attempt
