"""Live keys over HTTP, on a real gateway with a real SQLite store and decision log: the admin
API and its credentials, keys that work at once, revocation, rotation with an overlap,
expiry, per-key rate limits and default workflow, and the audit records of every change."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from gateway.keys import hash_key, key_id
from simulator import RunningSimulator
from tests.harness import openai_error, openai_upstream
from tests.servers import TEST_KEY, RunningGateway, gateway_config, running_gateway

ADMIN_TOKEN = "tg-admin-operator-token-live-keys"
ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}
CHAT = {"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hello"}]}
REFUSED_WITHIN_S = 1.0


@pytest.fixture
def live(upstream_sim: RunningSimulator, tmp_path: Path) -> Iterator[RunningGateway]:
    config = gateway_config(
        {"local": openai_upstream(upstream_sim.openai_base_url(0))},
        {"chat": [{"upstream": "local", "model": "sim-model"}]},
        state={"store": "sqlite", "sqlite_path": str(tmp_path / "state.db")},
        live_keys={},
        admin={"tokens": [hash_key(ADMIN_TOKEN)]},
        audit={"sink": "jsonl", "path": str(tmp_path / "audit.jsonl"), "flush_interval_ms": 0},
        routing={"workflows": ["nightly"]},
    )
    with running_gateway(config) as gateway:
        yield gateway


def create(gateway: RunningGateway, **spec: Any) -> dict[str, Any]:
    response = httpx.post(gateway.url + "/admin/keys", json={"tenant": "alpha", **spec}, headers=ADMIN)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def chat(gateway: RunningGateway, key: str, **headers: str) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", **headers}
    return httpx.post(gateway.base_url + "/chat/completions", json=CHAT, headers=headers)


def refused_within(gateway: RunningGateway, key: str, seconds: float) -> bool:
    """Whether a request with `key` is refused (401) before `seconds` have passed."""
    deadline = time.monotonic() + seconds
    while True:
        status = chat(gateway, key).status_code
        if status == 401:
            return True
        assert status == 200
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)  # paced: a fast gateway would otherwise meet the key's own rate limit first


def audit_records(tmp_path: Path, count: int) -> list[dict[str, Any]]:
    path = tmp_path / "audit.jsonl"
    deadline = time.monotonic() + 10
    while True:
        lines = path.read_bytes().splitlines() if path.exists() else []
        records = [orjson.loads(line) for line in lines]
        changes = [r for r in records if r["type"] == "key_change"]
        if len(changes) >= count or time.monotonic() > deadline:
            return changes
        time.sleep(0.02)


def test_the_admin_api_wants_an_operator_credential(live: RunningGateway) -> None:
    url = live.url + "/admin/keys"
    assert openai_error(httpx.get(url), 401)["code"] == "missing_admin_token"
    assert openai_error(httpx.get(url, headers={"authorization": "Bearer wrong"}), 401)["code"] == (
        "invalid_admin_token"
    )
    tenant_key = {"authorization": f"Bearer {TEST_KEY}"}
    for response in (
        httpx.get(url, headers=tenant_key),
        httpx.post(url, json={"tenant": "alpha"}, headers=tenant_key),
        httpx.delete(url + "/abc", headers=tenant_key),
        httpx.post(url + "/abc/rotate", headers=tenant_key),
    ):
        assert openai_error(response, 401)["code"] == "invalid_admin_token"
    assert httpx.get(url, headers=ADMIN).json() == {"object": "list", "data": []}


def test_without_live_keys_the_admin_api_says_what_it_needs(gateway: RunningGateway) -> None:
    error = openai_error(httpx.get(gateway.url + "/admin/keys", headers=ADMIN), 404)
    assert error["code"] == "admin_keys_not_configured"
    assert "live_keys" in error["message"]


def test_bad_requests_are_refused_in_the_openai_format(live: RunningGateway) -> None:
    url = live.url + "/admin/keys"
    unknown = openai_error(httpx.post(url, json={"tenant": "nobody"}, headers=ADMIN), 400)
    assert (unknown["code"], unknown["param"]) == ("unknown_tenant", "tenant")
    bad = openai_error(httpx.post(url, json={"tenant": "alpha", "priority": "urgent"}, headers=ADMIN), 400)
    assert bad["param"] == "priority"
    flow = openai_error(httpx.post(url, json={"tenant": "alpha", "workflow": "weekly"}, headers=ADMIN), 400)
    assert (flow["code"], flow["param"]) == ("unknown_workflow", "workflow")
    label = openai_error(
        httpx.post(url, json={"tenant": "alpha", "labels": {"Bad Name": "x"}}, headers=ADMIN), 400
    )
    assert label["param"].startswith("labels")
    extra = openai_error(httpx.post(url, json={"tenant": "alpha", "hash": "x"}, headers=ADMIN), 400)
    assert extra["param"] == "hash"
    assert openai_error(httpx.post(url, content=b"{", headers=ADMIN), 400)["code"] == "invalid_json"
    past = openai_error(httpx.post(url, json={"tenant": "alpha", "expires_at": 1}, headers=ADMIN), 400)
    assert past["param"] == "expires_at"
    assert openai_error(httpx.delete(url + "/000000000000", headers=ADMIN), 404)["code"] == "key_not_found"
    assert openai_error(httpx.put(url, headers=ADMIN), 405)["type"] == "invalid_request_error"
    assert openai_error(httpx.get(url, params={"owner": "x"}, headers=ADMIN), 400)["param"] == "owner"


def test_a_created_key_works_at_once_and_is_listed_without_its_secret(live: RunningGateway) -> None:
    made = create(
        live,
        label="ci-runner",
        labels={"team": "search", "env": "prod"},
        workflow="nightly",
        priority="background",
    )
    assert made["labels"] == {"env": "prod", "team": "search"}
    key = made.pop("key")
    assert made["state"] == "active" and made["id"] == key_id(hash_key(key))
    client = openai.OpenAI(base_url=live.base_url, api_key=key)
    answer = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content
    other = create(live, tenant="beta")
    listed = httpx.get(live.url + "/admin/keys", params={"tenant": "alpha"}, headers=ADMIN).json()["data"]
    assert [k["id"] for k in listed] == [made["id"]]
    assert listed[0] == made
    everyone = httpx.get(live.url + "/admin/keys", headers=ADMIN).json()["data"]
    assert {k["id"] for k in everyone} == {made["id"], other["id"]}
    assert key not in str(everyone) and hash_key(key) not in str(everyone)
    assert httpx.get(live.url + f"/admin/keys/{made['id']}", headers=ADMIN).json() == made
    # The key's default workflow names its requests that send no x-workflow in the metrics.
    page = httpx.get(live.url + "/metrics").text
    assert 'tollgate_workflow="nightly"' in page
    [age] = [line for line in page.splitlines() if line.startswith("tollgate_live_keys_age_seconds ")]
    assert 0 <= float(age.split()[1]) < 5  # read from the store moments ago
    # The config's keys work alongside.
    assert chat(live, TEST_KEY).status_code == 200


def test_a_revoked_key_is_refused_within_a_second(live: RunningGateway) -> None:
    key = create(live)["key"]
    assert chat(live, key).status_code == 200
    revoked = httpx.delete(live.url + f"/admin/keys/{key_id(hash_key(key))}", headers=ADMIN)
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    assert refused_within(live, key, REFUSED_WITHIN_S)
    assert openai_error(chat(live, key), 401)["code"] == "invalid_api_key"


def test_a_rotated_key_keeps_working_for_its_overlap_then_only_the_new_one_does(live: RunningGateway) -> None:
    old = create(live, label="svc", rate_limits={"requests_per_minute": 100})
    response = httpx.post(live.url + f"/admin/keys/{old['id']}/rotate", json={"overlap_s": 2}, headers=ADMIN)
    assert response.status_code == 201, response.text
    new = response.json()
    assert new["rotated_from"] == old["id"] and new["label"] == "svc"
    assert new["rate_limits"] == {"requests_per_minute": 100}
    assert new["replaces"]["expires_at"] is not None
    assert chat(live, new["key"]).status_code == 200
    assert chat(live, old["key"]).status_code == 200  # within the overlap
    assert refused_within(live, old["key"], 2 + 10)
    assert chat(live, new["key"]).status_code == 200
    again = httpx.post(live.url + f"/admin/keys/{old['id']}/rotate", headers=ADMIN)
    assert openai_error(again, 400)["code"] == "key_not_active"


def test_a_key_stops_working_when_it_expires(live: RunningGateway) -> None:
    made = create(live, expires_in_s=1)
    assert made["expires_at"] is not None
    assert chat(live, made["key"]).status_code == 200
    assert refused_within(live, made["key"], 1 + 10)
    listed = httpx.get(live.url + f"/admin/keys/{made['id']}", headers=ADMIN).json()
    assert listed["state"] == "expired"


def test_a_keys_own_rate_limit_applies_on_top_of_its_tenants(live: RunningGateway) -> None:
    key = create(live, rate_limits={"requests_per_minute": 1})["key"]
    assert chat(live, key).status_code == 200
    assert openai_error(chat(live, key), 429)["code"] == "rate_limit_exceeded"
    assert chat(live, TEST_KEY).status_code == 200  # the tenant's other keys are not limited


def test_every_change_is_an_audit_record_naming_the_credential_never_the_key(
    live: RunningGateway, tmp_path: Path
) -> None:
    made = create(live, label="audited", budgets=[{"window": "day", "usd": 5}])
    rotated = httpx.post(live.url + f"/admin/keys/{made['id']}/rotate", json={"overlap_s": 0}, headers=ADMIN)
    new = rotated.json()
    httpx.delete(live.url + f"/admin/keys/{new['id']}", headers=ADMIN)
    records = audit_records(tmp_path, 3)
    assert [(r["action"], r["key_id"]) for r in records] == [
        ("create", made["id"]),
        ("rotate", made["id"]),
        ("revoke", new["id"]),
    ]
    credential = f"admin:{key_id(hash_key(ADMIN_TOKEN))}"
    assert {r["by"] for r in records} == {credential}
    assert records[0]["changes"]["key"]["budgets"] == [{"window": "day", "usd": 5.0, "kind": "hard"}]
    assert records[1]["changes"]["new_key"]["id"] == new["id"]
    text = (tmp_path / "audit.jsonl").read_text()
    for secret in (made["key"], new["key"], ADMIN_TOKEN):
        assert secret not in text
        assert hash_key(secret).removeprefix("sha256:") not in text
