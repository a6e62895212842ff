"""Nothing exported carries a raw value: logs and the decision log after a run full of
secrets; and detection failures fail closed (or open, where configured), logged and counted."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import uvicorn

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.keys import hash_key
from gateway.policy.decision import RedactRules
from gateway.redaction.detector import Catalog, Found, Verdicts
from gateway.redaction.entities import BUILTIN
from gateway.redaction.settings import RedactionSettings, TenantRedaction, scrubber_for
from simulator import RunningSimulator
from tests.harness import captured_logs, openai_error, openai_upstream, recorded
from tests.redaction.corpus import JWT, PEM
from tests.servers import UPSTREAM_KEY, RunningGateway, gateway_config

SHIPPED_POLICIES = Path(__file__).resolve().parents[2] / "policies"
DEMO_KEY = "tg-test-redaction-demo"
EMAIL, CARD, AWS = "jane.doe@example.com", "4111 1111 1111 1111", "AKIAIOSFODNN7EXAMPLE"
RAW_VALUES = [
    EMAIL,
    CARD,
    AWS,
    JWT,
    "MIIEowIBAAKCAQEA",
    "+1 (415) 555-2671",
    "DE89 3704 0044 0532 0130 00",
    UPSTREAM_KEY,
]
SECRET_TEXT = f"me {EMAIL}, card {CARD}, key {AWS}, call +1 (415) 555-2671, iban DE89 3704 0044 0532 0130 00"


@contextmanager
def serving(config: GatewayConfig, redaction: RedactionSettings | None = None) -> Iterator[RunningGateway]:
    """The gateway on loopback, built with `create_app(config, redaction)`."""
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config, redaction),
            host="127.0.0.1",
            port=0,
            loop="asyncio",
            lifespan="on",
            access_log=False,
            log_config=None,
            timeout_graceful_shutdown=2,
        )
    )
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        threading.Event().wait(0.01)
    running = RunningGateway(server, thread)
    try:
        yield running
    finally:
        running.stop()


def test_logs_and_the_decision_log_carry_no_raw_value(upstream: RunningSimulator, tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(SHIPPED_POLICIES, policies)
    audit = tmp_path / "audit.jsonl"
    config = gateway_config(
        upstreams={"local": openai_upstream(upstream.openai_base_url(0))},
        models={"kimi-k2.6": [{"upstream": "local", "model": "sim-model"}]},
        tenants={"demo": {"models": ["*"]}},
        keys=[{"tenant": "demo", "hash": hash_key(DEMO_KEY)}],
        server={"access_log": True},
        audit={"path": str(audit), "fsync": "never"},
        policy={"dir": str(policies)},
    )
    with captured_logs(scrubber_for(config)) as logs, serving(config) as gateway:
        headers = {"authorization": f"Bearer {DEMO_KEY}", "x-request-id": AWS}
        with httpx.Client(base_url=gateway.url, headers=headers, timeout=30) as http:
            messages = [{"role": "user", "content": f"{SECRET_TEXT}\n{PEM}\n{JWT}"}]
            for stream in (False, True):
                body = {"model": "kimi-k2.6", "messages": messages, "stream": stream, "x_sim": {"echo": True}}
                assert http.post("/v1/chat/completions", json=body).status_code == 200
            # Unknown model named by an email, refused before any upstream call.
            assert http.post(
                "/v1/chat/completions", json={"model": EMAIL, "messages": messages}
            ).status_code in (
                403,
                404,
            )
        sent = recorded(upstream, AWS)
        assert sent, "the demo tenant's requests reached the upstream"
        # The shipped policy masks EMAIL, CREDIT_CARD and API_KEY for demo: the decision chose.
        seen = sent[0].body["messages"][0]["content"]
        assert "[EMAIL]" in seen
        assert "[CREDIT_CARD]" in seen
        assert "[AWS_ACCESS_KEY]" in seen
        assert "+1 (415) 555-2671" in seen  # PHONE is not among the decision's entities
    exported = logs.getvalue() + (audit.read_text() if audit.exists() else "")
    assert '"request"' in exported  # the access log ran
    assert audit.exists() and audit.read_text()  # and the decision log
    assert "[AWS_ACCESS_KEY]" in exported  # the request id, scrubbed wherever it was written
    for value in RAW_VALUES:
        assert value not in exported, value


class ExplodingCatalog(Catalog):
    """A detector that fails on every text, as a broken pattern or a bug would."""

    def find(self, text: str, names: frozenset[str], verdicts: Verdicts | None = None) -> list[Found]:
        raise RuntimeError(f"detector crashed on {text!r}")

    def scan(self, text: str, pos: int, final: bool, names: frozenset[str]) -> tuple[list[Found], int]:
        raise RuntimeError(f"detector crashed on {text!r}")


@pytest.fixture(scope="module")
def failing(upstream_sim: RunningSimulator) -> Iterator[tuple[RunningGateway, GatewayConfig]]:
    exploding = ExplodingCatalog(BUILTIN)

    def tenant(request: str, response: str, fail_open: bool) -> TenantRedaction:
        return TenantRedaction(RedactRules(request, response), exploding, fail_open, False)  # type: ignore[arg-type]

    names = ("closed", "open", "outclosed")
    settings = RedactionSettings(
        tenant("mask", "off", False),
        {"open": tenant("mask", "mask", True), "outclosed": tenant("off", "mask", False)},
    )
    config = gateway_config(
        upstreams={"local": openai_upstream(upstream_sim.openai_base_url(0))},
        models={"chat": [{"upstream": "local", "model": "sim-model"}]},
        tenants={name: {"models": ["*"]} for name in names},
        keys=[{"tenant": name, "hash": hash_key(f"tg-test-{name}")} for name in names],
    )
    with serving(config, settings) as gateway:
        yield gateway, config


def _post(gateway: RunningGateway, tenant: str, request_id: str, **extra: Any) -> httpx.Response:
    body = {"model": "chat", "messages": [{"role": "user", "content": SECRET_TEXT}], **extra}
    headers = {"authorization": f"Bearer tg-test-{tenant}", "x-request-id": request_id}
    return httpx.post(f"{gateway.url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def test_a_failing_detector_fails_the_request_closed(
    failing: tuple[RunningGateway, GatewayConfig], upstream: RunningSimulator, request_id: str
) -> None:
    gateway, config = failing
    with captured_logs(scrubber_for(config)) as logs:
        response = _post(gateway, "closed", request_id)
    error = openai_error(response, 500)
    assert error["code"] == "redaction_failed"
    assert request_id in error["message"]
    assert response.headers["x-request-id"] == request_id
    assert recorded(upstream, request_id) == []
    lines = logs.getvalue()
    assert "request redaction failed" in lines
    assert "RuntimeError" in lines
    assert EMAIL not in lines


def test_a_failing_response_detector_fails_closed(
    failing: tuple[RunningGateway, GatewayConfig], upstream: RunningSimulator, request_id: str
) -> None:
    gateway, _ = failing
    response = _post(gateway, "outclosed", request_id, x_sim={"reply": f"mail {EMAIL}"})
    error = openai_error(response, 500)
    assert error["code"] == "redaction_failed"
    assert EMAIL not in response.text


def test_a_failing_response_detector_ends_a_stream_with_an_error(
    failing: tuple[RunningGateway, GatewayConfig], upstream: RunningSimulator, request_id: str
) -> None:
    gateway, _ = failing
    response = _post(gateway, "outclosed", request_id, stream=True, x_sim={"reply": f"mail {EMAIL}"})
    # The role chunk (no text) went out before the first text failed: the stream ends with
    # an error event naming the request, without [DONE], and without the text.
    assert response.status_code == 200
    events = [line for line in response.text.splitlines() if line.startswith("data: ")]
    assert '"error"' in events[-1]
    assert request_id in events[-1]
    assert "[DONE]" not in response.text
    assert "mail" not in response.text


def test_a_fail_open_tenant_passes_unredacted_and_is_counted(
    failing: tuple[RunningGateway, GatewayConfig], upstream: RunningSimulator, request_id: str
) -> None:
    gateway, config = failing
    with (
        captured_logs(scrubber_for(config)) as logs,
        openai.OpenAI(base_url=gateway.base_url, api_key="tg-test-open", max_retries=0) as oai,
    ):
        answer = oai.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": SECRET_TEXT}],
            extra_body={"x_sim": {"echo": True}},
            extra_headers={"x-request-id": request_id},
        )
    assert answer.choices[0].message.content == SECRET_TEXT
    assert recorded(upstream, request_id)[0].body["messages"][0]["content"] == SECRET_TEXT
    assert '"fail_open":true' in logs.getvalue()
