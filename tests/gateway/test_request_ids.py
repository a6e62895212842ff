"""The id an upstream is sent: a UUID the gateway derives, never the client's X-Request-ID; the
client's id is echoed to the client and scrubbed wherever it is written."""

from __future__ import annotations

import hashlib
import hmac
import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.redaction.marks import Verbatim
from gateway.redaction.scrub import scrub_text
from gateway.request_ids import UpstreamIds, upstream_form
from simulator import RecordedRequest, RunningSimulator
from tests.harness import HELLO, captured_logs, eventually, openai_upstream, upstream_id
from tests.policy.gateway_setup import policy_gateway_config, write_policy_dir
from tests.servers import TEST_KEY, RunningGateway, gateway_config, running_gateway

SSN, API_KEY = "078-05-1120", "sk-proj-abcdefghijklmnopqrstuvwxyz012345"
CARD_LIKE = "c9fed51bc05a4969242448027da63f2a"  # hex whose digits pass the card check


def test_an_operator_holding_the_key_derives_the_same_id() -> None:
    """The documented derivation: HMAC-SHA256 of the request id under the key, its first 16
    bytes laid out as a version 4 UUID (as the standard library lays them out)."""
    key = b"k" * 32
    ids = UpstreamIds(key)
    for request_id in ("078-05-1120", "req_" + "ab" * 16, "über-Ω", CARD_LIKE):
        digest = hmac.new(key, request_id.encode(), hashlib.sha256).digest()
        assert ids(request_id) == str(uuid.UUID(bytes=digest[:16], version=4))


def test_the_upstream_id_is_a_version_4_uuid_derived_under_the_key() -> None:
    ids = UpstreamIds(b"k" * 32)
    derived = ids("078-05-1120")
    assert isinstance(derived, Verbatim)  # the gateway's own hex: logged as it is
    parsed = uuid.UUID(derived)
    assert str(parsed) == derived and parsed.version == 4
    assert ids("078-05-1120") == derived  # the same request id, the same upstream id
    assert UpstreamIds(b"k" * 32)("078-05-1120") == derived  # on every replica sharing the key
    assert UpstreamIds(b"x" * 32)("078-05-1120") != derived
    assert ids("078-05-1121") != derived
    assert upstream_form(derived, "uuid") == derived
    assert upstream_form(derived, "gateway") == "req_" + parsed.hex


@pytest.fixture(scope="module")
def ids_gateway(upstream_sim: RunningSimulator) -> Iterator[RunningGateway]:
    base = upstream_sim.openai_base_url(0)
    config = gateway_config(
        upstreams={
            "uuid": openai_upstream(base),
            "named": openai_upstream(base, request_id_header="x-correlation-id", request_id_format="gateway"),
            "none": openai_upstream(base, request_id_header=None),
        },
        models={
            "chat": [{"upstream": "uuid", "model": "sim-model"}],
            "named": [{"upstream": "named", "model": "sim-model"}],
            "none": [{"upstream": "none", "model": "sim-model"}],
        },
        server={"access_log": True},
    )
    with running_gateway(config) as running:
        yield running


def call(
    gateway: RunningGateway, client_id: str | None, model: str = "chat", stream: bool = False
) -> httpx.Response:
    headers = {"authorization": f"Bearer {TEST_KEY}"}
    if client_id is not None:
        headers["x-request-id"] = client_id
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        response = http.post(
            "/v1/chat/completions",
            json={"model": model, "messages": HELLO, "stream": stream},
            headers=headers,
        )
    assert response.status_code == 200, response.text
    return response


def only_request(sim: RunningSimulator) -> RecordedRequest:
    [attempt] = list(sim.requests)
    return attempt


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("client_id", [SSN, API_KEY, CARD_LIKE, "plain-id-1"])
def test_the_client_id_never_reaches_the_upstream_and_is_echoed_to_the_client(
    ids_gateway: RunningGateway, upstream: RunningSimulator, client_id: str, stream: bool
) -> None:
    response = call(ids_gateway, client_id, stream=stream)
    assert response.headers["x-request-id"] == client_id  # the client's own id, back to the client
    sent = only_request(upstream)
    header = sent.headers["x-request-id"]
    assert client_id not in str(sent.headers)
    assert uuid.UUID(header).version == 4  # what llama-cpp-python (and every other server) accepts
    assert header == upstream_id(client_id)


def test_a_minted_request_id_is_sent_upstream_as_a_uuid_too(
    ids_gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    minted = call(ids_gateway, None).headers["x-request-id"]
    assert minted.startswith("req_")
    assert only_request(upstream).headers["x-request-id"] == upstream_id(minted)


def test_the_header_and_its_form_are_the_upstreams_to_choose(
    ids_gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    call(ids_gateway, SSN, model="named")
    sent = only_request(upstream)
    assert "x-request-id" not in sent.headers
    assert sent.headers["x-correlation-id"] == "req_" + uuid.UUID(upstream_id(SSN)).hex
    upstream.clear()
    call(ids_gateway, SSN, model="none")
    sent = only_request(upstream)
    assert "x-request-id" not in sent.headers and "x-correlation-id" not in sent.headers


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    with captured_logs() as out:
        yield out


@pytest.mark.parametrize("client_id", [SSN, CARD_LIKE])
def test_the_access_line_scrubs_the_clients_id_and_names_the_upstream_id(
    ids_gateway: RunningGateway, upstream: RunningSimulator, lines: io.StringIO, client_id: str
) -> None:
    call(ids_gateway, client_id)
    sent = only_request(upstream).headers["x-request-id"]

    def access() -> list[dict[str, Any]]:
        entries = [orjson.loads(line) for line in lines.getvalue().splitlines()]
        return [
            e
            for e in entries
            if e.get("logger") == "tollgate.access" and e.get("upstream_request_id") == sent
        ]

    assert eventually(lambda: len(access()) == 1)
    [entry] = access()
    assert entry["request_id"] == scrub_text(client_id) != client_id
    assert client_id not in lines.getvalue()


@pytest.mark.parametrize("client_id", [SSN, CARD_LIKE])
def test_the_decision_log_scrubs_the_clients_id(
    upstream_sim: RunningSimulator, tmp_path: Path, client_id: str
) -> None:
    audit = tmp_path / "audit.jsonl"
    policy = {"dir": str(write_policy_dir(tmp_path / "policies"))}
    config = policy_gateway_config(upstream_sim, policy, audit={"path": str(audit), "mandatory": True})
    with running_gateway(config) as gateway:
        call(gateway, client_id)
    [record] = [r for r in map(orjson.loads, audit.read_text().splitlines()) if r["type"] == "decision"]
    assert record["request_id"] == record["input"]["request_id"] == scrub_text(client_id) != client_id
    assert client_id not in audit.read_text()
