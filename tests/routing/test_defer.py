"""Defer, end to end: the shipped policy (tenants set for the test), a real gateway with async
jobs over loopback, the simulator and the openai client.

Once the upstream throttles, a background request is deferred: 429 `deferred` with
Retry-After when sent synchronously, 202 and a job with `Prefer: respond-async`. Normal and
critical requests are served as before; a deferred request reserves nothing (a rate limit
it would have used stays free); the decision log records the deferral, and the policy sees
whether the request is an async job."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from simulator import RunningSimulator, SimConfig, Simulator
from tests.harness import eventually, openai_error, recorded
from tests.jobs.gateways import auth, jobs_config
from tests.policy.conftest import SHIPPED_POLICIES
from tests.servers import OTHER_TENANT_KEY, TEST_KEY, UPSTREAM_KEY, RunningGateway, running_gateway

CHAT = "/v1/chat/completions"
QUESTION = {
    "model": "chat",
    "messages": [{"role": "user", "content": "what is a tollgate?"}],
    "max_tokens": 8,
}
BACKGROUND = {"x-priority": "background"}
ASYNC = {"prefer": "respond-async"}
RPM = 3  # requests a minute the tenant may make: what a deferred request must leave free


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    running = Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY))
    yield running
    running.stop()


def policy_dir(target: Path) -> Path:
    shutil.copytree(SHIPPED_POLICIES, target)
    data_file = target / "data.yaml"
    data = yaml.safe_load(data_file.read_text())
    data["tenants"] = {"alpha": {"models": ["*"]}, "beta": {"models": ["*"]}}
    data["routing"] = {"defer_background": True}
    data_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


@pytest.fixture
def gateway(sim: RunningSimulator, tmp_path: Path) -> Iterator[tuple[RunningGateway, Path]]:
    """A gateway of the test's own: the throttle pause (long here) is per process."""
    audit = tmp_path / "audit.jsonl"
    config = jobs_config(
        sim,
        tmp_path,
        jobs={"throttle_pause_s": 600},  # throttled for the whole test once the upstream says so
        policy={"dir": str(policy_dir(tmp_path / "policies"))},
        audit={"sink": "jsonl", "path": str(audit), "flush_interval_ms": 0},
        tenants={
            "alpha": {"models": ["*"], "rate_limits": {"requests_per_minute": RPM}},
            "beta": {"models": ["*"], "budgets": [{"window": "day", "tokens": 1, "kind": "soft"}]},
        },
        metering={"band_cache_s": 0},
    )
    sim.faults.clear()
    try:
        with running_gateway(config) as running:
            yield running, audit
    finally:
        sim.faults.clear()


def decision_of(audit: Path, request_id: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def logged() -> bool:
        records = [json.loads(line) for line in audit.read_text().splitlines() if line.strip()]
        found[:] = [r for r in records if r.get("type") == "decision" and r["request_id"] == request_id]
        return bool(found)

    assert eventually(logged), f"no decision record for {request_id}"
    return found[0]


def throttle(http: httpx.Client, sim: RunningSimulator) -> None:
    """One request the upstream answers with 429 (Workers AI's 3040): the gateway is throttled."""
    sim.faults.set({"status": 429, "code": 3040}, count=1)
    openai_error(http.post(CHAT, json=QUESTION, headers=auth()), 429)
    sim.faults.clear()


def test_a_background_request_is_deferred_while_the_upstream_throttles(
    gateway: tuple[RunningGateway, Path], sim: RunningSimulator
) -> None:
    running, audit = gateway
    with httpx.Client(base_url=running.url, timeout=30) as http:
        served = http.post(CHAT, json=QUESTION, headers={**auth(), **BACKGROUND, "x-request-id": "r-before"})
        assert served.status_code == 200, served.text  # capacity is there: served as usual
        before = decision_of(audit, "r-before")
        assert before["input"]["capacity"] == "ok" and before["deferred"] is False
        throttle(http, sim)

    with (
        openai.OpenAI(base_url=running.base_url, api_key=TEST_KEY, max_retries=0) as client,
        pytest.raises(openai.RateLimitError) as refused,
    ):
        client.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "summarise the night's logs"}],
            extra_headers={**BACKGROUND, "x-request-id": "r-deferred"},
        )
    assert refused.value.code == "deferred"
    assert int(refused.value.response.headers["retry-after"]) >= 1
    record = decision_of(audit, "r-deferred")
    assert record["deferred"] is True and record["decision"]["defer"] is True
    assert record["input"]["capacity"] == "throttled"
    assert record["input"]["async"] is False and record["input"]["priority"] == "background"
    assert recorded(sim, "r-deferred") == []  # the upstream never saw it


def test_normal_and_critical_requests_are_not_deferred(
    gateway: tuple[RunningGateway, Path], sim: RunningSimulator
) -> None:
    running, audit = gateway
    with httpx.Client(base_url=running.url, timeout=30) as http:
        throttle(http, sim)
        for priority in ("normal", "critical"):
            request_id = f"r-{priority}"
            answer = http.post(
                CHAT, json=QUESTION, headers={**auth(), "x-priority": priority, "x-request-id": request_id}
            )
            assert answer.status_code == 200, answer.text
            record = decision_of(audit, request_id)
            assert record["input"]["capacity"] == "throttled" and record["deferred"] is False


def test_with_prefer_respond_async_a_deferred_request_becomes_a_job(
    gateway: tuple[RunningGateway, Path], sim: RunningSimulator
) -> None:
    running, audit = gateway
    with httpx.Client(base_url=running.url, timeout=30) as http:
        throttle(http, sim)
        accepted = http.post(CHAT, json=QUESTION, headers={**auth(), **BACKGROUND, **ASYNC})
        assert accepted.status_code == 202, accepted.text
        job = accepted.json()
        assert job["object"] == "async.job" and job["status"] == "queued"
        assert http.get(accepted.headers["location"], headers=auth()).status_code == 202  # still waiting
    record = decision_of(audit, job["id"])
    assert record["input"]["async"] is True and record["input"]["capacity"] == "throttled"
    assert record["deferred"] is True


def test_a_deferred_request_reserves_nothing(
    gateway: tuple[RunningGateway, Path], sim: RunningSimulator
) -> None:
    running, _ = gateway
    with httpx.Client(base_url=running.url, timeout=30) as http:
        throttle(http, sim)  # the first of the RPM requests
        for _ in range(RPM + 2):
            error = openai_error(http.post(CHAT, json=QUESTION, headers={**auth(), **BACKGROUND}), 429)
            assert error["code"] == "deferred"
        # Had the deferred requests taken a place in the rate limit, these would be refused.
        for _ in range(RPM - 1):
            assert http.post(CHAT, json=QUESTION, headers=auth()).status_code == 200
        error = openai_error(http.post(CHAT, json=QUESTION, headers=auth()), 429)
        assert error["code"] == "rate_limit_exceeded"  # the limit counts what was served


def test_a_background_request_is_deferred_once_a_soft_budget_is_used_up(
    gateway: tuple[RunningGateway, Path],
) -> None:
    running, audit = gateway
    beta = {"authorization": f"Bearer {OTHER_TENANT_KEY}"}
    with httpx.Client(base_url=running.url, timeout=30) as http:
        assert http.post(CHAT, json=QUESTION, headers={**beta, **BACKGROUND}).status_code == 200
        request_id = f"r-soft-{uuid.uuid4().hex[:8]}"
        refused = http.post(CHAT, json=QUESTION, headers={**beta, **BACKGROUND, "x-request-id": request_id})
        assert openai_error(refused, 429)["code"] == "deferred"
        assert int(refused.headers["retry-after"]) >= 1
        assert http.post(CHAT, json=QUESTION, headers=beta).status_code == 200  # normal: served
    record = decision_of(audit, request_id)
    assert record["input"]["budget"] == "soft_exceeded" and record["input"]["capacity"] == "ok"
