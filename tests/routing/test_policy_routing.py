"""Routing by policy, end to end: the shipped policy (its routing table extended for the
test aliases), a real gateway over loopback, the simulator and the openai client.

An extraction workflow is served by the economy alias; once a soft budget is used up a
normal request is downgraded to it and a critical one is not; a downgrade reserves no more
than the original would have; labels reach the decision log; bad labels get a 400."""

from __future__ import annotations

import hashlib
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

from gateway.keys import hash_key
from simulator import RunningSimulator
from tests.harness import HELLO, eventually, openai_error, openai_upstream, recorded
from tests.policy.conftest import SHIPPED_POLICIES
from tests.servers import RunningGateway, gateway_config, running_gateway

pytestmark = pytest.mark.usefixtures("one_budget_day")

KEYS = {name: f"tg-test-routing-{name}" for name in ("plain", "hot", "batch", "narrow", "onsite")}
DEAR, CHEAP = "sim-dear", "sim-cheap"
ADMIN_TOKEN = "tg-test-routing-admin"
SUPPORT = "You are the support assistant of Example Corp."


def policy_dir(target: Path) -> Path:
    shutil.copytree(SHIPPED_POLICIES, target)
    data_file = target / "data.yaml"
    data = yaml.safe_load(data_file.read_text())
    data["tenants"] = {
        "plain": {"models": ["*"]},
        "hot": {"models": ["*"]},
        "narrow": {"models": ["chat"]},
        "onsite": {"models": ["*"], "upstreams": ["local"]},  # its data never leaves the local upstream
    }
    data["routing"]["class_aliases"] = {"economy": "cheap"}
    data_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


@pytest.fixture(scope="module")
def routed_gateway(upstream_sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("routing")
    dear_budget = {"window": "day", "usd": 0.3}  # hard: a dear request with 1024 tokens out does not fit
    config = gateway_config(
        upstreams={
            "local": openai_upstream(upstream_sim.openai_base_url(0)),
            "remote": openai_upstream(upstream_sim.openai_base_url(1)),
        },
        models={
            "chat": [{"upstream": "local", "model": DEAR, "class": "frontier"}],
            "cheap": [  # the remote one first: a tenant that may not use it must skip it
                {"upstream": "remote", "model": CHEAP, "class": "economy"},
                {"upstream": "local", "model": CHEAP, "class": "economy"},
            ],
        },
        tenants={
            "plain": {"models": ["*"]},
            "hot": {
                "models": ["*"],
                "budgets": [{"window": "day", "tokens": 1, "kind": "soft"}, dear_budget],
            },
            "narrow": {"models": ["chat"]},
            "onsite": {"models": ["*"]},
            "alpha": {"models": ["*"]},
            "beta": {"models": ["chat"]},
        },
        keys=[
            {"tenant": "plain", "hash": hash_key(KEYS["plain"])},
            {"tenant": "hot", "hash": hash_key(KEYS["hot"])},
            {
                "tenant": "plain",
                "hash": hash_key(KEYS["batch"]),
                "workflow": "extraction",
                "priority": "background",
            },
            {"tenant": "narrow", "hash": hash_key(KEYS["narrow"])},
            {"tenant": "onsite", "hash": hash_key(KEYS["onsite"])},
        ],
        routing={
            "workflows": ["extraction", "reasoning"],
            "prompt_families": {"support": hashlib.sha256(SUPPORT.encode()).hexdigest()[:16]},
        },
        prices={DEAR: {"input": 100, "output": 400}, CHEAP: {"input": 0.1, "output": 0.2}},
        policy={"dir": str(policy_dir(root / "policies"))},
        state={"store": "sqlite", "sqlite_path": str(root / "state.db")},
        metering={"band_cache_s": 0},
        audit={"sink": "jsonl", "path": str(root / "audit.jsonl"), "flush_interval_ms": 0},
        admin={"tokens": [hash_key(ADMIN_TOKEN)]},
    )
    with running_gateway(config) as gateway:
        yield gateway, root / "audit.jsonl"


@pytest.fixture
def gateway(routed_gateway: Any, upstream: RunningSimulator) -> RunningGateway:
    gateway: RunningGateway = routed_gateway[0]
    return gateway


def ask(gateway: RunningGateway, key: str, **headers: str) -> tuple[httpx.Response, str]:
    request_id = f"req-{uuid.uuid4().hex}"
    response = httpx.post(
        gateway.base_url + "/chat/completions",
        json={"model": "chat", "messages": HELLO},
        headers={"authorization": f"Bearer {KEYS[key]}", "x-request-id": request_id, **headers},
        timeout=30,
    )
    return response, request_id


def served_model(upstream: RunningSimulator, request_id: str) -> str:
    [sent] = recorded(upstream, request_id)
    model: str = sent.body["model"]
    return model


def test_an_extraction_workflow_is_served_by_the_economy_alias(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    with openai.OpenAI(base_url=gateway.base_url, api_key=KEYS["plain"], max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="chat", messages=HELLO, extra_headers={"x-workflow": "extraction", "x-request-id": "r-ex-1"}
        )
    reply = raw.parse()
    assert raw.headers["x-tollgate-routed-alias"] == "cheap"
    assert reply.model == CHEAP
    assert served_model(upstream, "r-ex-1") == CHEAP


def test_a_workflow_without_a_class_and_an_unknown_one_stay_on_the_model_asked_for(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    for workflow in ("reasoning", "free-text-workflow"):
        response, request_id = ask(gateway, "plain", **{"x-workflow": workflow})
        assert response.status_code == 200
        assert "x-tollgate-routed-alias" not in response.headers
        assert served_model(upstream, request_id) == DEAR


def test_a_keys_default_workflow_routes_its_requests(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    response, request_id = ask(gateway, "batch")
    assert response.headers["x-tollgate-routed-alias"] == "cheap"
    assert served_model(upstream, request_id) == CHEAP


def test_no_route_to_an_alias_the_tenant_may_not_use(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    response, request_id = ask(gateway, "narrow", **{"x-workflow": "extraction"})
    assert response.status_code == 200
    assert served_model(upstream, request_id) == DEAR


def test_once_a_soft_budget_is_used_up_normal_work_is_downgraded_and_critical_work_is_not(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    first, _ = ask(gateway, "hot", **{"x-priority": "critical"})
    assert first.status_code == 200  # uses up the soft budget (1 token)
    critical, critical_id = ask(gateway, "hot", **{"x-priority": "critical"})
    normal, normal_id = ask(gateway, "hot")
    background, background_id = ask(gateway, "hot", **{"x-priority": "Background"})
    assert critical.status_code == normal.status_code == background.status_code == 200
    assert served_model(upstream, critical_id) == DEAR
    assert "x-tollgate-routed-alias" not in critical.headers
    for response, request_id in ((normal, normal_id), (background, background_id)):
        assert response.headers["x-tollgate-routed-alias"] == "cheap"
        assert served_model(upstream, request_id) == CHEAP
    # The reservation is priced on the alias that serves: the hard budget ($0.30) cannot cover
    # 4096 dear output tokens (the critical request is clamped) but easily covers cheap ones.
    assert "x-tollgate-max-tokens-clamped" in critical.headers
    assert "x-tollgate-max-tokens-clamped" not in normal.headers


def test_a_bad_priority_is_refused_with_a_clear_error(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    response, request_id = ask(gateway, "plain", **{"x-priority": "urgent"})
    error = openai_error(response, 400)
    assert error["code"] == "invalid_header"
    assert error["param"] == "x-priority"
    assert "critical, normal or background" in error["message"]
    assert recorded(upstream, request_id) == []


def test_the_decision_log_records_the_labels_and_the_route(
    routed_gateway: Any, upstream: RunningSimulator
) -> None:
    gateway, audit_path = routed_gateway
    response, request_id = ask(gateway, "plain", **{"x-workflow": "extraction", "x-priority": "critical"})
    assert response.status_code == 200

    def records() -> list[dict[str, Any]]:
        lines = audit_path.read_text().splitlines()
        return [r for r in map(json.loads, lines) if r.get("request_id") == request_id]

    assert eventually(lambda: len(records()) == 2)
    decision, completion = sorted(records(), key=lambda r: r["type"] != "decision")
    assert decision["input"]["workflow"] == "extraction"
    assert decision["input"]["priority"] == "critical"
    assert decision["decision"]["route"]["alias"] == "cheap"
    assert completion["routed_alias"] == "cheap"
    assert completion["served_model"] == CHEAP
    assert completion["workflow"] == "extraction"


def test_spend_by_workflow_sums_exactly_to_spend_by_tenant(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    def spend(group_by: str) -> dict[str, Any]:
        response = httpx.get(
            gateway.url + "/admin/spend",
            params={"group_by": group_by},
            headers={"authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        document: dict[str, Any] = response.json()
        return document

    before = spend("tenant")["total"]["requests"]
    for workflow in ("extraction", "reasoning", "not-listed"):
        assert ask(gateway, "plain", **{"x-workflow": workflow})[0].status_code == 200
    assert ask(gateway, "batch")[0].status_code == 200
    # Settling follows the response: wait for the four to reach the ledger.
    assert eventually(lambda: spend("tenant")["total"]["requests"] >= before + 4)
    by_workflow, by_tenant = spend("workflow"), spend("tenant")
    workflows = {entry["workflow"]: entry for entry in by_workflow["data"]}
    assert {"extraction", "reasoning", "other"} <= set(workflows)
    assert "not-listed" not in workflows
    assert workflows["extraction"]["requests"] >= 2  # the header, and the batch key's default
    total_by_workflow = sum(entry["cost_micros"] for entry in by_workflow["data"])
    total_by_tenant = sum(entry["cost_micros"] for entry in by_tenant["data"])
    assert total_by_workflow == total_by_tenant == by_tenant["total"]["cost_micros"] > 0
    refused = httpx.get(
        gateway.url + "/admin/spend",
        params={"group_by": "colour"},
        headers={"authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=30,
    )
    assert "group_by must be one of" in openai_error(refused, 400)["message"]


def test_spend_and_token_metrics_carry_the_workflow(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    assert ask(gateway, "plain", **{"x-workflow": "reasoning"})[0].status_code == 200

    def page() -> str:
        return httpx.get(gateway.url + "/metrics", timeout=30).text

    def has_workflow_lines() -> bool:
        text = page()
        return all(
            any(
                line.startswith(name) and 'tollgate_workflow="reasoning"' in line
                for line in text.splitlines()
            )
            for name in ("tollgate_spend_usd_total", "tollgate_tokens_total", "tollgate_request_duration")
        )

    assert eventually(has_workflow_lines)
    assert 'tollgate_workflow="not-listed"' not in page()


def test_cache_hits_are_counted_under_a_named_prompt_family(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    messages = [{"role": "system", "content": SUPPORT}, {"role": "user", "content": "hello"}]
    response = httpx.post(
        gateway.base_url + "/chat/completions",
        json={"model": "chat", "messages": messages},
        headers={"authorization": f"Bearer {KEYS['plain']}"},
        timeout=30,
    )
    assert response.status_code == 200

    def named() -> bool:
        text = httpx.get(gateway.url + "/metrics", timeout=30).text
        return any(
            line.startswith("tollgate_prompt_cache_tokens_total")
            and 'tollgate_prompt_family="support"' in line
            for line in text.splitlines()
        )

    assert eventually(named)


def test_a_routed_request_never_reaches_an_upstream_its_policy_does_not_permit(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    response, request_id = ask(gateway, "onsite", **{"x-workflow": "extraction"})
    assert response.headers["x-tollgate-routed-alias"] == "cheap"
    [sent] = recorded(upstream, request_id)
    assert (sent.replica, sent.body["model"]) == (0, CHEAP)  # local, not the preferred remote
    response, request_id = ask(gateway, "plain", **{"x-workflow": "extraction"})
    [sent] = recorded(upstream, request_id)
    assert (sent.replica, sent.body["model"]) == (1, CHEAP)  # a tenant without the restriction
    # Labelled confidential (local only), the request keeps to local as well.
    response, request_id = ask(
        gateway, "plain", **{"x-workflow": "extraction", "x-data-class": "confidential"}
    )
    [sent] = recorded(upstream, request_id)
    assert (sent.replica, sent.body["model"]) == (0, CHEAP)


def test_a_routed_stream_says_so_in_its_head(gateway: RunningGateway, upstream: RunningSimulator) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=KEYS["plain"], max_retries=0)
    with (
        client,
        client.chat.completions.with_streaming_response.create(
            model="chat",
            messages=HELLO,
            stream=True,
            extra_headers={"x-workflow": "extraction", "x-request-id": "r-ex-stream"},
        ) as raw,
    ):
        assert raw.headers["x-tollgate-routed-alias"] == "cheap"
        models = {chunk.model for chunk in raw.parse() if chunk.model}
    assert models == {CHEAP}
    assert served_model(upstream, "r-ex-stream") == CHEAP
