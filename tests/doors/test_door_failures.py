"""Failures through the doors, each in its API's own format: a stream cut mid-way ends in the
door's error event, a rate limit is Anthropic's 429 rate_limit_error, and the decision log
says which API a request came through."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from gateway.keys import hash_key
from simulator import RunningSimulator
from tests.doors.conftest import doors_config
from tests.harness import eventually
from tests.servers import TEST_KEY, RunningGateway, running_gateway

REPO = Path(__file__).parents[2]
LIMITED_KEY = "tg-test-key-limited"
POLICY_DATA = """
defaults:
  on_tool_violation: reject
  redact: {request: "off", response: "off", entities: []}
  limits: {max_tokens: 4096, tool_output_max_chars: 4000}
  soft_budget_max_tokens: 1024
data_classes: {}
tenants:
  alpha: {models: ["*"], tools: []}
  limited: {models: ["*"], tools: []}
"""
CUT = {"x_sim": {"reply": "one two three four", "fault": {"kind": "disconnect", "after_chunks": 3}}}


@pytest.fixture(scope="module")
def audit_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("doors-audit") / "audit.jsonl"


@pytest.fixture(scope="module")
def gateway(
    upstream_sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory, audit_log: Path
) -> Iterator[RunningGateway]:
    tmp = tmp_path_factory.mktemp("doors-failures")
    policies = tmp / "policies"
    policies.mkdir()
    shutil.copy(REPO / "policies" / "authz.rego", policies / "authz.rego")
    (policies / "data.yaml").write_text(POLICY_DATA)
    config = doors_config(
        upstream_sim,
        tmp / "responses.db",
        tenants={
            "alpha": {"models": ["*"]},
            "beta": {"models": ["chat"]},
            "limited": {"models": ["*"], "rate_limits": {"requests_per_minute": 1}},
        },
        keys=[
            {"tenant": "alpha", "hash": hash_key(TEST_KEY)},
            {"tenant": "limited", "hash": hash_key(LIMITED_KEY)},
        ],
        state={"sqlite_path": str(tmp / "state.db")},
        audit={"path": str(audit_log), "fsync": "never"},
        policy={"dir": str(policies)},
    )
    with running_gateway(config) as running:
        yield running


def _events(raw: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in raw.strip().split("\n\n"):
        name, data = block.split("\n")
        events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


def test_a_cut_messages_stream_ends_in_anthropics_error_event(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    body = {
        "model": "chat",
        "max_tokens": 32,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        **CUT,
    }
    with httpx.stream(
        "POST", f"{gateway.url}/v1/messages", json=body, headers={"x-api-key": TEST_KEY}
    ) as response:
        raw = response.read().decode()
    events = _events(raw)
    name, error = events[-1]
    assert name == "error"
    assert error["type"] == "error"
    assert error["error"]["type"] == "api_error"
    assert "message_stop" not in [n for n, _ in events]
    with (
        anthropic.Anthropic(base_url=gateway.url, api_key=TEST_KEY, max_retries=0) as client,
        pytest.raises(anthropic.APIStatusError),
        client.messages.stream(
            model="chat", max_tokens=32, messages=[{"role": "user", "content": "hi"}], extra_body=CUT
        ) as stream,
    ):
        stream.get_final_message()


def test_a_cut_responses_stream_ends_in_an_error_event(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    body = {"model": "chat", "stream": True, "store": False, "input": "hi", **CUT}
    with httpx.stream(
        "POST", f"{gateway.base_url}/responses", json=body, headers={"authorization": f"Bearer {TEST_KEY}"}
    ) as response:
        raw = response.read().decode()
    events = _events(raw)
    assert [n for n, _ in events[-2:]] == ["error", "response.failed"]
    error, failed = events[-2][1], events[-1][1]
    assert error["code"] == "upstream_incomplete"
    assert failed["sequence_number"] == len(events) - 1
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"]["code"] == "upstream_incomplete"
    assert "response.completed" not in [n for n, _ in events]
    with (
        openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as client,
        client.responses.stream(model="chat", input="hi", store=False, extra_body=CUT) as stream,
    ):
        kinds = [event.type for event in stream]
        with pytest.raises(RuntimeError, match=r"response\.completed"):  # the SDK's word for a failed stream
            stream.get_final_response()
    assert kinds[-2:] == ["error", "response.failed"]


def test_rate_limits_are_anthropics_429(gateway: RunningGateway, upstream: RunningSimulator) -> None:
    url = f"{gateway.url}/v1/messages"
    body = {"model": "chat", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    statuses = [httpx.post(url, json=body, headers={"x-api-key": LIMITED_KEY}) for _ in range(2)]
    assert statuses[0].status_code == 200
    limited = statuses[1]
    assert limited.status_code == 429
    assert limited.json()["error"]["type"] == "rate_limit_error"
    assert int(limited.headers["retry-after"]) >= 1


def test_the_decision_log_says_which_api(
    gateway: RunningGateway, upstream: RunningSimulator, audit_log: Path
) -> None:
    with anthropic.Anthropic(base_url=gateway.url, api_key=TEST_KEY, max_retries=0) as claude:
        claude.messages.create(
            model="chat",
            max_tokens=4,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-request-id": "doors-audit-messages"},
        )
    with openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0) as oai:
        oai.responses.create(
            model="chat", input="hi", store=False, extra_headers={"x-request-id": "doors-audit-responses"}
        )

    def apis() -> dict[str, str]:
        records = (
            [orjson.loads(line) for line in audit_log.read_bytes().splitlines()] if audit_log.exists() else []
        )
        return {
            r["request_id"]: r["input"]["api"]
            for r in records
            if r.get("type") == "decision" and r.get("request_id", "").startswith("doors-audit-")
        }

    assert eventually(lambda: len(apis()) == 2)
    assert apis() == {"doors-audit-messages": "messages", "doors-audit-responses": "responses"}
