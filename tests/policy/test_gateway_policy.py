"""The policy end to end: a real gateway over loopback, the openai client, the simulator,
and each engine (embedded, and OPA's REST API served by the OPA-protocol test server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from simulator import RunningSimulator
from tests.harness import HELLO, chat_body, openai_error, recorded
from tests.policy.gateway_setup import policy_gateway_config, write_policy_dir
from tests.policy.opa_server import OpaProtocolServer, opa_protocol_server
from tests.servers import TEST_KEY, RunningGateway, running_gateway


@pytest.fixture(scope="module")
def module_policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_policy_dir(tmp_path_factory.mktemp("policy") / "policies")


@pytest.fixture(scope="module")
def module_opa(module_policy_dir: Path) -> Iterator[OpaProtocolServer]:
    with opa_protocol_server(str(module_policy_dir)) as server:
        yield server


@pytest.fixture(scope="module", params=["rego", "opa"])
def policy_gateway(
    request: pytest.FixtureRequest,
    upstream_sim: RunningSimulator,
    module_policy_dir: Path,
    module_opa: OpaProtocolServer,
) -> Iterator[RunningGateway]:
    policy = {"dir": str(module_policy_dir)}
    if request.param == "opa":
        policy |= {"engine": "opa", "opa": {"url": module_opa.url, "timeout_ms": 2000}}
    with running_gateway(policy_gateway_config(upstream_sim, policy)) as gateway:
        yield gateway


@pytest.fixture
def http(policy_gateway: RunningGateway) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=policy_gateway.url, headers={"authorization": f"Bearer {TEST_KEY}"}, timeout=30
    ) as c:
        yield c


def test_an_allowed_request_is_served_with_max_tokens_capped(
    policy_gateway: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    with openai.OpenAI(base_url=policy_gateway.base_url, api_key=TEST_KEY, max_retries=0) as client:
        reply = client.chat.completions.create(
            model="chat", messages=HELLO, max_tokens=5000, extra_headers={"x-request-id": request_id}
        )
    assert reply.choices[0].message.content
    [sent] = recorded(upstream, request_id)
    assert sent.body["max_tokens"] == 64


@pytest.mark.parametrize(
    ("asked", "header"), [(5000, "64; reason=policy"), (None, "64; reason=policy"), (32, None)]
)
def test_the_response_says_when_the_policy_set_or_lowered_the_output_limit(
    http: httpx.Client, asked: int | None, header: str | None
) -> None:
    body = chat_body() if asked is None else chat_body(max_tokens=asked)
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert response.headers.get("x-tollgate-max-tokens") == header


def test_a_model_the_policy_does_not_list_is_refused_with_its_reason(policy_gateway: RunningGateway) -> None:
    with (
        openai.OpenAI(base_url=policy_gateway.base_url, api_key=TEST_KEY, max_retries=0) as client,
        pytest.raises(openai.PermissionDeniedError) as caught,
    ):
        client.chat.completions.create(model="forbidden", messages=HELLO)
    assert caught.value.status_code == 403
    assert caught.value.code == "policy_denied"
    assert "model forbidden is not allowed for tenant alpha" in caught.value.message


def test_an_unknown_model_is_still_a_404(http: httpx.Client) -> None:
    error = openai_error(http.post("/v1/chat/completions", json=chat_body("nope")), 404)
    assert error["code"] == "model_not_found"


def test_a_tool_not_listed_is_refused_for_a_rejecting_tenant(http: httpx.Client) -> None:
    tools = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in ("search", "shell")]
    error = openai_error(http.post("/v1/chat/completions", json=chat_body(tools=tools)), 403)
    assert error["code"] == "tool_not_allowed"
    assert error["message"] == "Tools not allowed by policy: 'shell'."
    assert error["param"] == "tools"


def test_a_data_class_keeps_the_request_on_its_permitted_upstreams(
    http: httpx.Client, upstream: RunningSimulator, request_id: str
) -> None:
    headers = {"x-data-class": "offsite", "x-request-id": request_id}
    response = http.post("/v1/chat/completions", json=chat_body("failover"), headers=headers)
    assert response.status_code == 200, response.text
    assert [r.replica for r in recorded(upstream, request_id)] == [1]  # the backup, never local


def test_no_permitted_upstream_is_a_403(
    http: httpx.Client, upstream: RunningSimulator, request_id: str
) -> None:
    headers = {"x-data-class": "offsite", "x-request-id": request_id}
    error = openai_error(http.post("/v1/chat/completions", json=chat_body("chat"), headers=headers), 403)
    assert error["code"] == "policy_denied"
    assert "no upstream serving model chat may receive this tenant's data" in error["message"]
    assert recorded(upstream, request_id) == []


def test_a_malformed_data_class_is_a_400(http: httpx.Client) -> None:
    response = http.post("/v1/chat/completions", json=chat_body(), headers={"x-data-class": "no spaces"})
    error = openai_error(response, 400)
    assert "x-data-class" in error["message"]


def test_embeddings_are_decided_too(http: httpx.Client) -> None:
    ok = http.post("/v1/embeddings", json={"model": "embed", "input": "hello"})
    assert ok.status_code == 200, ok.text
    offsite = http.post(
        "/v1/embeddings", json={"model": "embed", "input": "hi"}, headers={"x-data-class": "offsite"}
    )
    assert openai_error(offsite, 403)["code"] == "policy_denied"


def test_an_opa_outage_is_a_503_until_opa_is_back(
    upstream_sim: RunningSimulator, module_policy_dir: Path
) -> None:
    with opa_protocol_server(str(module_policy_dir)) as opa:
        policy = {"dir": str(module_policy_dir), "engine": "opa", "opa": {"url": opa.url, "timeout_ms": 300}}
        with (
            running_gateway(policy_gateway_config(upstream_sim, policy)) as gateway,
            httpx.Client(
                base_url=gateway.url, headers={"authorization": f"Bearer {TEST_KEY}"}, timeout=30
            ) as http,
        ):
            assert http.post("/v1/chat/completions", json=chat_body()).status_code == 200
            opa.stop()
            error = openai_error(http.post("/v1/chat/completions", json=chat_body()), 503)
            assert error["code"] == "policy_unavailable"
            assert "policy engine (OPA) could not be reached" in error["message"]
            opa.start(opa.port)
            assert http.post("/v1/chat/completions", json=chat_body()).status_code == 200
