"""Webhooks: a tenant registers a URL its policy allows, a finished job's event reaches it
signed (Standard Webhooks), and a receiver that fails twice still gets it. A real receiver
over loopback, which the test policy names for tenant alpha (private addresses are refused
unless the policy names them); the shipped Rego policy decides, each decision logged."""

from __future__ import annotations

import base64
import hashlib
import hmac
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from adapters.state.sqlite_jobs import SQLiteJobStore
from gateway.config import JobsConfig
from gateway.errors import InvalidRequest
from gateway.exchange import Principal, Tenant
from gateway.jobs.api_types import ApiRequest
from gateway.jobs.webhook_destinations import WebhookDestinations
from gateway.jobs.webhooks import DELIVERY_PREFIX
from gateway.jobs.webhooks_api import WebhooksApi
from simulator import RunningSimulator
from tests.harness import eventually, openai_error
from tests.jobs.gateways import OTHER, auth, jobs_config, poll_job
from tests.policy.gateway_setup import write_policy_dir
from tests.servers import RunningGateway, running_gateway

ALPHA = Principal(Tenant("alpha"), "k-alpha", "tests")


class Receiver:
    """An HTTP server that answers 500 to its first `failures` requests, then 204."""

    def __init__(self, failures: int) -> None:
        self.received: list[tuple[dict[str, str], bytes, int]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                status = 500 if len(receiver.received) < failures else 204
                receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, body, status))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/tollgate"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


LOOPBACK_HOOKS = {"allowed_hosts": ["127.0.0.1"], "allowed_schemes": ["http"], "allow_private": True}
POLICY_TENANTS: dict[str, Any] = {
    "alpha": {"models": ["*"], "destinations": {"webhook_url": LOOPBACK_HOOKS}},
    # Host A, not host B; no private address (the shipped default would allow any public host).
    "beta": {
        "models": ["chat"],
        "destinations": {"webhook_url": {"allowed_hosts": ["hooks.a.example"], "allowed_schemes": ["https"]}},
    },
}


def policy_gateway(
    sim: RunningSimulator, root: Path, policy_dir: Path, **jobs: Any
) -> AbstractContextManager[RunningGateway]:
    config = jobs_config(
        sim,
        root,
        jobs={"webhook_allow_private": True, "webhook_retry_base_s": 0.05, **jobs},
        policy={"dir": str(policy_dir), "state_dir": str(root / "policy-state")},
        audit={"path": str(root / "audit.jsonl"), "fsync": "never", "flush_interval_ms": 0},
    )
    return running_gateway(config)


def decisions(root: Path) -> list[dict[str, Any]]:
    text = (root / "audit.jsonl").read_bytes()
    records = [orjson.loads(line) for line in text.splitlines() if line.strip()]
    return [r for r in records if r.get("type") == "decision" and r["input"]["endpoint"] == "webhooks"]


@pytest.fixture(scope="module")
def gateway_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("webhooks")


@pytest.fixture(scope="module")
def gateway(
    sim: RunningSimulator, gateway_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    policy_dir = write_policy_dir(tmp_path_factory.mktemp("policy") / "policies", POLICY_TENANTS)
    with policy_gateway(sim, gateway_root, policy_dir) as running:
        yield running


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver(failures=2)
    yield made
    made.stop()


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The Standard Webhooks check, written out from the specification."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(
        hmac.compare_digest(part.removeprefix("v1,"), expected)
        for part in headers["webhook-signature"].split()
    )


def test_a_finished_job_is_delivered_signed_even_to_a_receiver_that_fails_twice(
    gateway: RunningGateway, receiver: Receiver
) -> None:
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        registered = http.post("/v1/webhooks", json={"url": receiver.url}, headers=auth())
        assert registered.status_code == 200, registered.text
        hook = registered.json()
        assert hook["secret"].startswith("whsec_") and hook["url"] == receiver.url
        listed = http.get("/v1/webhooks", headers=auth()).json()["data"]
        assert [h["id"] for h in listed] == [hook["id"]] and "secret" not in listed[0]
        assert http.get("/v1/webhooks", headers=OTHER).json()["data"] == []
        body = {"model": "chat", "messages": [{"role": "user", "content": "tell me when done"}]}
        accepted = http.post("/v1/chat/completions", json=body, headers={**auth(), "prefer": "respond-async"})
        job_id = accepted.json()["id"]
        assert poll_job(http, accepted.headers["location"], auth()).status_code == 200
        assert eventually(lambda: any(status == 204 for _, _, status in receiver.received), seconds=30)
        try:
            assert [status for _, _, status in receiver.received] == [500, 500, 204]
            ids = {headers["webhook-id"] for headers, _, _ in receiver.received}
            assert len(ids) == 1  # the same event, retried
            for headers, payload, _ in receiver.received:
                assert verify(hook["secret"], headers, payload)
                assert abs(int(headers["webhook-timestamp"]) - time.time()) < 300
                assert not verify("whsec_" + base64.b64encode(b"x" * 24).decode(), headers, payload)
            event = orjson.loads(receiver.received[-1][1])
            assert event["type"] == "job.completed" and event["data"]["id"] == job_id
            assert event["data"]["location"] == f"/v1/async/{job_id}"
            openai_error(http.get(f"/v1/async/{event['id']}", headers=auth()), 404)
        finally:
            openai_error(http.delete(f"/v1/webhooks/{hook['id']}", headers=OTHER), 404)
            assert http.delete(f"/v1/webhooks/{hook['id']}", headers=auth()).json()["deleted"] is True


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/x",  # not https
        "https://127.0.0.1/x",
        "https://10.1.2.3/x",
        "https://localhost/x",
        "https://[::1]/x",
        "https://169.254.169.254/latest",
        "https://other.example.net/x",  # not a host the config allows
        "not a url",
    ],
)
async def test_a_webhook_url_must_be_an_allowed_public_destination(tmp_path: Path, url: str) -> None:
    """Without a policy block: any public host over https, within the config's bound."""
    store = SQLiteJobStore(tmp_path / "jobs.db")
    api = WebhooksApi(store, WebhookDestinations(JobsConfig(webhook_hosts=["*.example.com"]), lambda: None))

    async def read(limit: int) -> bytes:
        return orjson.dumps({"url": url})

    try:
        with pytest.raises(InvalidRequest) as refused:
            await api.handle(ApiRequest("POST", "/v1/webhooks", "", {}, "r1", read), ALPHA, [])
        assert refused.value.param == "url"
        assert await store.webhooks("alpha") == []

        async def good(limit: int) -> bytes:
            return orjson.dumps({"url": "https://hooks.example.com/x"})

        answer = await api.handle(ApiRequest("POST", "/v1/webhooks", "", {}, "r2", good), ALPHA, [])
        assert orjson.loads(answer.body)["url"] == "https://hooks.example.com/x"
    finally:
        await store.aclose()


def test_the_policy_allows_host_a_and_refuses_host_b_and_each_decision_is_logged(
    gateway: RunningGateway, gateway_root: Path
) -> None:
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        allowed = http.post("/v1/webhooks", json={"url": "https://hooks.a.example/events"}, headers=OTHER)
        assert allowed.status_code == 200, allowed.text
        refused = openai_error(
            http.post("/v1/webhooks", json={"url": "https://hooks.b.example/events"}, headers=OTHER), 400
        )
        assert refused["code"] == "url_not_allowed" and refused["param"] == "url"
        assert "policy" in refused["message"] and "hooks.b.example" in refused["message"]
        # The config lets private addresses through to the policy; beta's policy names none.
        for private in ("http://127.0.0.1:9/x", "https://10.1.2.3/x", "https://localhost/x"):
            error = openai_error(http.post("/v1/webhooks", json={"url": private}, headers=OTHER), 400)
            assert error["code"] == "url_not_allowed"
        assert [h["url"] for h in http.get("/v1/webhooks", headers=OTHER).json()["data"]] == [
            "https://hooks.a.example/events"
        ]
        http.delete(f"/v1/webhooks/{allowed.json()['id']}", headers=OTHER)
    logged = [r for r in decisions(gateway_root) if r["tenant"] == "beta"]
    assert len(logged) >= 5
    assert all(r["allow"] is True and r["input"]["key"]["id"] for r in logged)
    assert logged[-1]["decision"]["destinations"]["webhook_url"]["allowed_hosts"] == ["hooks.a.example"]


def test_a_delivery_asks_the_policy_again_and_is_dropped_once_the_url_is_no_longer_allowed(
    sim: RunningSimulator, tmp_path: Path, receiver: Receiver
) -> None:
    policy_dir = write_policy_dir(tmp_path / "policies", POLICY_TENANTS)
    root = tmp_path / "gateway"
    root.mkdir()
    with (
        policy_gateway(sim, root, policy_dir) as running,
        httpx.Client(base_url=running.url, timeout=30) as http,
    ):
        registered = http.post("/v1/webhooks", json={"url": receiver.url}, headers=auth())
        assert registered.status_code == 200, registered.text
        hook_id = registered.json()["id"]
        # alpha's rule withdrawn: the shipped default (public https hosts only) applies.
        data_file = policy_dir / "data.yaml"
        data = yaml.safe_load(data_file.read_text())
        data["tenants"]["alpha"].pop("destinations")
        data_file.write_text(yaml.safe_dump(data, sort_keys=False))

        def withdrawn() -> bool:
            """The edited policy in force: the receiver's URL can no longer be registered."""
            probe = http.post("/v1/webhooks", json={"url": receiver.url + "/probe"}, headers=auth())
            if probe.status_code == 200:
                http.delete(f"/v1/webhooks/{probe.json()['id']}", headers=auth())
                return False
            return bool(probe.json()["error"]["code"] == "url_not_allowed")

        assert eventually(withdrawn, seconds=30)
        body = {"model": "chat", "messages": [{"role": "user", "content": "tell me when done"}]}
        accepted = http.post("/v1/chat/completions", json=body, headers={**auth(), "prefer": "respond-async"})
        job_id = accepted.json()["id"]
        assert poll_job(http, accepted.headers["location"], auth()).status_code == 200
        delivery = f"{DELIVERY_PREFIX}{job_id}_{hook_id}"

        def delivery_state() -> str | None:
            with sqlite3.connect(root / "jobs.db") as db:
                row = db.execute("SELECT state FROM jobs WHERE id = ?", (delivery,)).fetchone()
            return row[0] if row else None

        assert eventually(lambda: delivery_state() == "cancelled", seconds=30)
    assert receiver.received == []
    asked = [r for r in decisions(root) if r["request_id"] == delivery]
    assert len(asked) == 1 and asked[0]["input"]["key"] is None and asked[0]["tenant"] == "alpha"
