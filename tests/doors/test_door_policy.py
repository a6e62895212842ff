"""The policy sees which API a request came through (`input.api`): a rule on it refuses one
door and lets the others through, each refusal in its door's own envelope."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from simulator import RunningSimulator
from tests.policy.gateway_setup import policy_gateway_config, write_policy_dir
from tests.servers import OTHER_TENANT_KEY, TEST_KEY, RunningGateway, running_gateway

RULE = """package gateway.authz

deny contains "the Messages API is not allowed for tenant beta" if {
\tinput.tenant == "beta"
\tinput.api == "messages"
}
"""


@pytest.fixture(scope="module")
def gateway(
    upstream_sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    tmp = tmp_path_factory.mktemp("door-policy")
    policies = write_policy_dir(tmp / "policies")
    (policies / "doors.rego").write_text(RULE)
    config = policy_gateway_config(upstream_sim, {"dir": str(policies)}, responses={"store": "off"})
    with running_gateway(config) as running:
        yield running


def test_a_rule_on_the_api_refuses_one_door(gateway: RunningGateway, upstream: RunningSimulator) -> None:
    hello = [{"role": "user", "content": "hi"}]
    with (
        anthropic.Anthropic(base_url=gateway.url, api_key=OTHER_TENANT_KEY, max_retries=0) as beta,
        pytest.raises(anthropic.PermissionDeniedError) as caught,
    ):
        beta.messages.create(model="chat", max_tokens=8, messages=hello)
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "permission_error",
            "message": "Denied by policy: the Messages API is not allowed for tenant beta.",
        },
    }
    with openai.OpenAI(base_url=gateway.base_url, api_key=OTHER_TENANT_KEY, max_retries=0) as beta_oai:
        assert beta_oai.chat.completions.create(model="chat", max_tokens=8, messages=hello).choices
        assert beta_oai.responses.create(model="chat", max_output_tokens=8, input="hi").status == "incomplete"
        assert (
            beta_oai.responses.create(model="chat", max_output_tokens=8, input="hi").store is False
        )  # store: off
    with anthropic.Anthropic(base_url=gateway.url, api_key=TEST_KEY, max_retries=0) as alpha:
        assert alpha.messages.create(model="chat", max_tokens=8, messages=hello).stop_reason == "max_tokens"


def test_a_refused_stream_is_refused_before_it_starts(
    gateway: RunningGateway, upstream: RunningSimulator
) -> None:
    body = {"model": "chat", "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    response = httpx.post(f"{gateway.url}/v1/messages", json=body, headers={"x-api-key": OTHER_TENANT_KEY})
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_error"
