"""What an upstream relays to the client follows the response mode: its error texts as well as
its content, through the real gateway, the real openai client and the simulator."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.keys import hash_key
from simulator import RunningSimulator
from tests.harness import openai_error, openai_upstream
from tests.servers import RunningGateway, gateway_config, running_gateway

EMAIL, CARD = "jane.doe@example.com", "4111 1111 1111 1111"

TENANTS: dict[str, dict[str, Any]] = {
    "outmask": {"response": "mask"},
    "outblock": {"response": "block"},
    "tokenize": {"request": "tokenize", "response": "tokenize"},
    "off": {},
}


def key_for(tenant: str) -> str:
    return f"tg-test-relayed-{tenant}"


@pytest.fixture(scope="module")
def relayed_gateway(upstream_sim: RunningSimulator) -> Iterator[RunningGateway]:
    config = gateway_config(
        upstreams={"local": openai_upstream(upstream_sim.openai_base_url(0), retries=0)},
        models={"chat": [{"upstream": "local", "model": "sim-model"}]},
        tenants={name: {"models": ["*"], "redaction": block} for name, block in TENANTS.items()},
        keys=[{"tenant": name, "hash": hash_key(key_for(name))} for name in TENANTS],
    )
    with running_gateway(config) as running:
        yield running


def post(gateway: RunningGateway, tenant: str, body: dict[str, Any]) -> httpx.Response:
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        return http.post(
            "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key_for(tenant)}"}
        )


def rejected(message: str, stream: bool = False, status: int = 400) -> dict[str, Any]:
    """A request the simulator refuses with `status` and an error text quoting `message`."""
    fault = {"status": status, "message": f"invalid content: {message!r}"}
    return {
        "model": "chat",
        "messages": [{"role": "user", "content": "hello"}],
        "stream": stream,
        "x_sim": {"fault": fault},
    }


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [400, 413, 422])
def test_an_upstream_error_quoting_the_request_is_masked(
    relayed_gateway: RunningGateway, upstream: RunningSimulator, stream: bool, status: int
) -> None:
    response = post(relayed_gateway, "outmask", rejected(f"mail {EMAIL}, card {CARD}", stream, status))
    error = openai_error(response, 400 if status == 422 else status)
    assert error["code"] == "upstream_rejected"
    assert EMAIL not in error["message"] and CARD not in error["message"]
    assert "mail [EMAIL], card [CREDIT_CARD]" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_error_is_cut_where_the_first_entity_begins_for_block(
    relayed_gateway: RunningGateway, upstream: RunningSimulator, stream: bool
) -> None:
    error = openai_error(post(relayed_gateway, "outblock", rejected(f"mail {EMAIL} here", stream)), 400)
    assert error["message"].endswith("invalid content: 'mail ")


def test_an_upstream_error_with_nothing_to_hide_and_a_tenant_without_redaction_pass_unchanged(
    relayed_gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    clean = openai_error(post(relayed_gateway, "outmask", rejected("too many tokens")), 400)
    assert clean["message"] == "Upstream 'local' rejected the request: invalid content: 'too many tokens'"
    off = openai_error(post(relayed_gateway, "off", rejected(f"mail {EMAIL}")), 400)
    assert EMAIL in off["message"]
