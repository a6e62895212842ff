"""The route stage's part in routing: candidates of the class a policy asks for, and the
prompt-family session key for conversations that named no session."""

from __future__ import annotations

import pytest

from gateway.errors import PermissionDenied
from gateway.exchange import Candidate, Endpoint, Exchange, Principal, Tenant
from gateway.policy.decision import Decision, RouteRules
from gateway.routing.fingerprint import prompt_family_key
from gateway.stages.route import Route

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
ROUTE = Route(
    {
        "kimi": [
            Candidate("workers-ai", "@cf/moonshotai/kimi-k2.6", "frontier"),
            Candidate("self-hosted", "kimi-small", "small"),
            Candidate("self-hosted-big", "kimi-big", "frontier"),
        ]
    }
)


def _exchange(decision: Decision | None = None, session_key: str | None = None) -> Exchange:
    exchange = Exchange(
        request_id="req_1",
        endpoint=Endpoint.CHAT,
        received_at=0.0,
        deadline=60.0,
        headers={},
        raw_body=b"",
        body={"model": "kimi", "messages": MESSAGES},
        principal=Principal(Tenant("acme"), "key1"),
        session_key=session_key,
        model_alias="kimi",
        decision=decision,
    )
    return exchange


async def test_a_policys_model_class_keeps_only_that_class_in_order() -> None:
    exchange = _exchange(Decision(allow=True, route=RouteRules(model_class="frontier")))
    await ROUTE(exchange)
    assert [c.upstream for c in exchange.candidates] == ["workers-ai", "self-hosted-big"]


async def test_with_the_class_and_the_upstreams_both_constraining() -> None:
    rules = RouteRules(upstreams=("self-hosted", "self-hosted-big"), model_class="frontier")
    exchange = _exchange(Decision(allow=True, route=rules))
    await ROUTE(exchange)
    assert [c.upstream for c in exchange.candidates] == ["self-hosted-big"]


async def test_no_candidate_of_the_class_is_a_policy_denial() -> None:
    exchange = _exchange(Decision(allow=True, route=RouteRules(model_class="tiny")))
    with pytest.raises(PermissionDenied) as caught:
        await ROUTE(exchange)
    assert caught.value.code == "policy_denied"
    assert "tiny" in caught.value.message


async def test_without_a_session_the_prompt_family_is_the_key() -> None:
    exchange = _exchange()
    await ROUTE(exchange)
    assert exchange.session_key == prompt_family_key("acme", exchange.body)
    assert exchange.session_key is not None


async def test_a_client_session_key_is_kept() -> None:
    exchange = _exchange(session_key="0123456789abcdef0123456789abcdef")
    await ROUTE(exchange)
    assert exchange.session_key == "0123456789abcdef0123456789abcdef"
