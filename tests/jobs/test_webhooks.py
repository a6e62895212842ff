"""Webhooks: a tenant registers a URL, a finished job's event reaches it signed (Standard
Webhooks), and a receiver that fails twice still gets it. A real receiver over loopback."""

from __future__ import annotations

import base64
import hashlib
import hmac
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from adapters.state.sqlite_jobs import SQLiteJobStore
from gateway.config import JobsConfig
from gateway.errors import InvalidRequest
from gateway.jobs.api_types import ApiRequest
from gateway.jobs.webhooks_api import WebhooksApi
from simulator import RunningSimulator, SimConfig, Simulator
from tests.harness import eventually, openai_error
from tests.jobs.gateways import OTHER, auth, jobs_config, poll_job
from tests.servers import UPSTREAM_KEY, RunningGateway, running_gateway


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


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    running = Simulator.start_in_thread(SimConfig(api_key=UPSTREAM_KEY))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def gateway(sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    jobs = {"webhook_allow_private": True, "webhook_retry_base_s": 0.05}
    with running_gateway(jobs_config(sim, tmp_path_factory.mktemp("webhooks"), jobs=jobs)) as running:
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
    store = SQLiteJobStore(tmp_path / "jobs.db")
    api = WebhooksApi(store, JobsConfig(webhook_hosts=["*.example.com"]))

    async def read(limit: int) -> bytes:
        return orjson.dumps({"url": url})

    try:
        with pytest.raises(InvalidRequest) as refused:
            await api.handle(ApiRequest("POST", "/v1/webhooks", "", {}, "r1", read), "alpha", [])
        assert refused.value.param == "url"
        assert await store.webhooks("alpha") == []

        async def good(limit: int) -> bytes:
            return orjson.dumps({"url": "https://hooks.example.com/x"})

        answer = await api.handle(ApiRequest("POST", "/v1/webhooks", "", {}, "r2", good), "alpha", [])
        assert orjson.loads(answer.body)["url"] == "https://hooks.example.com/x"
    finally:
        await store.aclose()
