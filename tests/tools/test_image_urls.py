"""Image URLs in messages are outbound destinations: the policy's
`destinations.image_url` says where they may point, data: URLs always pass, and a URL it
does not allow is refused (403 image_url_not_allowed) before any upstream is called."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.policy.decision import ArgConstraint, Destinations, MalformedDecision, parse_decision
from gateway.tools.image_urls import check_image_url
from simulator import RunningSimulator
from tests.harness import openai_error, openai_upstream, recorded
from tests.servers import OTHER_TENANT_KEY, TEST_KEY, RunningGateway, gateway_config, running_gateway

REPO = Path(__file__).parents[2]
CDN = ArgConstraint(allowed_hosts=("cdn.example.com", "*.images.example"))
ANY = Destinations().image_url
PIXEL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNk"

MALICIOUS = [
    ("http://cdn.example.com/a.png", "scheme 'http'"),
    ("https://evil.com/a.png", "host 'evil.com' is not allowed"),
    ("https://cdn.example.com@evil.com/a.png", "credentials"),
    ("https://cdn.example.com:0/a.png", "invalid port"),
    ("https://169.254.169.254/latest/meta-data/", "not public"),
    ("https://0xa9fea9fe/", "not public"),
    ("https://[::ffff:127.0.0.1]/a.png", "not public"),
    ("https://localhost./a.png", "is local"),
    ("https://cdn.example.com\\@evil.com/", "backslashes"),
    (" data:image/png;base64,AAAA", "whitespace"),
    ("cdn.example.com/a.png", "not a data: URL or a URL with a host"),
    ("//cdn.example.com/a.png", "not a data: URL or a URL with a host"),
    ("file:///etc/passwd", "scheme 'file'"),
]
BENIGN = [
    "https://cdn.example.com/a.png",
    "HTTPS://CDN.example.com./a.png?x=1",
    "https://eu.images.example/b.jpg",
    PIXEL,
    "DATA:image/png;base64,AAAA",
]


@pytest.mark.parametrize(("url", "reason"), MALICIOUS)
def test_image_urls_the_rule_does_not_allow_are_refused(url: str, reason: str) -> None:
    result = check_image_url(url, CDN)
    assert result is not None
    assert reason in result, result


@pytest.mark.parametrize("url", BENIGN)
def test_image_urls_the_rule_allows_pass(url: str) -> None:
    assert check_image_url(url, CDN) is None


def test_without_the_policys_word_any_public_https_host_may_serve_images() -> None:
    assert parse_decision({"allow": True}).destinations.image_url == ANY
    assert check_image_url("https://upload.wikimedia.org/a.png", ANY) is None
    assert check_image_url("http://upload.wikimedia.org/a.png", ANY) is not None
    assert check_image_url("https://10.0.0.1/a.png", ANY) is not None


def test_the_policy_sets_the_image_rule_and_a_malformed_one_is_a_deny() -> None:
    rule = {"allowed_hosts": ["cdn.example.com"], "allowed_schemes": ["https", "http"]}
    decision = parse_decision({"allow": True, "destinations": {"image_url": rule}})
    assert decision.destinations.image_url == ArgConstraint(("cdn.example.com",), ("https", "http"))
    with pytest.raises(MalformedDecision, match=r"destinations\.image_url\.allowed_hosts"):
        parse_decision({"allow": True, "destinations": {"image_url": {"allowed_hosts": "cdn.example.com"}}})
    with pytest.raises(MalformedDecision, match="destinations must be an object"):
        parse_decision({"allow": True, "destinations": []})


POLICY_DATA = """
defaults:
  on_tool_violation: reject
  redact: {request: "off", response: "off", entities: []}
  limits: {max_tokens: 256}
  soft_budget_max_tokens: 128
data_classes: {}
tenants:
  alpha:
    models: ["*"]
    destinations:
      image_url: {allowed_hosts: ["cdn.example.com", "*.images.example", "127.0.0.1"]}
  beta:
    models: ["*"]
"""


@pytest.fixture(scope="module")
def guarded(
    upstream_sim: RunningSimulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    directory = tmp_path_factory.mktemp("images") / "policies"
    directory.mkdir()
    shutil.copy(REPO / "policies" / "authz.rego", directory / "authz.rego")
    (directory / "data.yaml").write_text(POLICY_DATA)
    config = gateway_config(
        upstreams={"local": openai_upstream(upstream_sim.openai_base_url(0))},
        models={"chat": [{"upstream": "local", "model": "sim-model"}]},
        policy={"dir": str(directory)},
    )
    with running_gateway(config) as running:
        yield running


def _body(*parts: Any, stream: bool = False) -> dict[str, Any]:
    content = [{"type": "text", "text": "what is this?"}, *parts]
    return {"model": "chat", "messages": [{"role": "user", "content": content}], "stream": stream}


def _image(url: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def _post(
    gateway: RunningGateway, body: dict[str, Any], request_id: str, key: str = TEST_KEY
) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}", "x-request-id": request_id},
        timeout=30,
    )


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("url", "reason"), MALICIOUS)
def test_a_request_with_an_image_url_the_policy_refuses_is_a_403(
    guarded: RunningGateway, upstream: RunningSimulator, request_id: str, url: str, reason: str, stream: bool
) -> None:
    response = _post(guarded, _body(_image(PIXEL), _image(url), stream=stream), request_id)
    error = openai_error(response, 403)
    assert error["code"] == "image_url_not_allowed"
    assert error["type"] == "permission_error"
    assert error["param"] == "messages[0].content[2].image_url.url"
    assert error["message"].startswith(
        "Image URL not allowed by policy: messages[0].content[2].image_url.url: "
    )
    assert reason in error["message"]
    assert recorded(upstream, request_id) == []


def test_private_hosts_are_refused_even_when_the_tenant_lists_them(
    guarded: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    error = openai_error(_post(guarded, _body(_image("https://127.0.0.1/a.png")), request_id), 403)
    assert "address 127.0.0.1 is not public" in error["message"]
    assert recorded(upstream, request_id) == []


def test_allowed_image_urls_reach_the_upstream_untouched(
    guarded: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    parts = [_image(url) for url in BENIGN]
    with openai.OpenAI(base_url=guarded.base_url, api_key=TEST_KEY, max_retries=0) as client:
        client.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": [{"type": "text", "text": "compare"}, *parts]}],
            extra_headers={"x-request-id": request_id},
        )
    [sent] = recorded(upstream, request_id)
    assert [p["image_url"]["url"] for p in sent.body["messages"][0]["content"][1:]] == BENIGN


def test_the_shipped_default_allows_any_public_https_host(
    guarded: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    ok = _post(guarded, _body(_image("https://upload.wikimedia.org/a.png")), request_id, OTHER_TENANT_KEY)
    assert ok.status_code == 200, ok.text
    refused = _post(guarded, _body(_image("https://192.168.1.1/a.png")), request_id + "-x", OTHER_TENANT_KEY)
    assert openai_error(refused, 403)["code"] == "image_url_not_allowed"


def test_an_image_url_given_as_a_string_or_an_input_image_is_checked(
    guarded: RunningGateway, upstream: RunningSimulator, request_id: str
) -> None:
    as_string = {"type": "image_url", "image_url": "https://evil.com/a.png"}
    error = openai_error(_post(guarded, _body(as_string), request_id), 403)
    assert error["param"] == "messages[0].content[1].image_url"
    input_image = {"type": "input_image", "image_url": "https://evil.com/a.png"}
    error = openai_error(_post(guarded, _body(input_image), request_id), 403)
    assert error["code"] == "image_url_not_allowed"
    assert recorded(upstream, request_id) == []


@pytest.mark.parametrize("url", [None, 42, ["https://cdn.example.com/a.png"], {"href": "x"}])
def test_an_image_url_that_is_not_a_string_is_a_400(
    guarded: RunningGateway, upstream: RunningSimulator, request_id: str, url: Any
) -> None:
    error = openai_error(_post(guarded, _body(_image(url)), request_id), 400)
    assert error["code"] == "invalid_value"
    assert error["param"] == "messages[0].content[1].image_url.url"
    assert recorded(upstream, request_id) == []


def test_webhook_urls_default_to_any_public_https_host_and_alone_may_allow_private_ones() -> None:
    assert parse_decision({"allow": True}).destinations.webhook_url == ANY
    rule = {"allowed_hosts": ["127.0.0.1"], "allowed_schemes": ["http"], "allow_private": True}
    parsed = parse_decision({"allow": True, "destinations": {"webhook_url": rule}}).destinations.webhook_url
    assert parsed == ArgConstraint(("127.0.0.1",), ("http",), allow_private=True)
    with pytest.raises(MalformedDecision, match=r"image_url\.allow_private is only for"):
        parse_decision({"allow": True, "destinations": {"image_url": rule}})
    with pytest.raises(MalformedDecision, match=r"tool_args\.fetch\.url\.allow_private"):
        parse_decision({"allow": True, "tool_args": {"fetch": {"url": rule}}})
    with pytest.raises(MalformedDecision, match=r"webhook_url\.allow_private must be a boolean"):
        parse_decision({"allow": True, "destinations": {"webhook_url": {**rule, "allow_private": "yes"}}})
