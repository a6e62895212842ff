"""admit: the API key comes first, then the body; the session id is scoped to the tenant."""

from __future__ import annotations

import re

import httpx
import openai
import pytest

from simulator import RunningSimulator
from tests.harness import HELLO, chat_body, openai_error, recorded
from tests.servers import OTHER_TENANT_KEY, TEST_KEY, RunningGateway


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings"])
def test_missing_key_is_401(gateway: RunningGateway, upstream: RunningSimulator, path: str) -> None:
    error = openai_error(httpx.post(gateway.url + path, json=chat_body()), 401)
    assert error["code"] == "missing_api_key"
    assert error["type"] == "invalid_request_error"
    assert upstream.requests == []


@pytest.mark.parametrize("authorization", ["Bearer tg-not-a-key", "Basic dXNlcjpwYXNz", "Bearer", TEST_KEY])
def test_bad_key_is_401(gateway: RunningGateway, authorization: str) -> None:
    response = httpx.post(
        gateway.url + "/v1/chat/completions", json=chat_body(), headers={"authorization": authorization}
    )
    assert openai_error(response, 401)["code"] == "invalid_api_key"


def test_key_is_checked_before_the_body(gateway: RunningGateway) -> None:
    response = httpx.post(
        gateway.url + "/v1/chat/completions", content=b"{not json", headers={"authorization": "Bearer nope"}
    )
    assert openai_error(response, 401)["code"] == "invalid_api_key"


def test_openai_client_raises_authentication_error(gateway: RunningGateway) -> None:
    with (
        openai.OpenAI(base_url=gateway.base_url, api_key="tg-wrong", max_retries=0) as oai,
        pytest.raises(openai.AuthenticationError) as caught,
    ):
        oai.chat.completions.create(model="chat", messages=HELLO)
    assert caught.value.status_code == 401
    assert caught.value.code == "invalid_api_key"


def _affinity(http: httpx.Client, sim: RunningSimulator, request_id: str, **headers: str) -> str | None:
    response = http.post(
        "/v1/chat/completions", json=chat_body(), headers={"x-request-id": request_id, **headers}
    )
    assert response.status_code == 200
    [attempt] = recorded(sim, request_id)
    return attempt.headers.get("x-session-affinity")


def test_session_key_is_hashed_and_scoped_to_the_tenant(
    http: httpx.Client, upstream: RunningSimulator, request_id: str
) -> None:
    alpha = _affinity(http, upstream, request_id + "-a", **{"x-session-affinity": "session-42"})
    alpha_by_id = _affinity(http, upstream, request_id + "-b", **{"x-session-id": "session-42"})
    beta = _affinity(
        http,
        upstream,
        request_id + "-c",
        **{"x-session-id": "session-42", "authorization": f"Bearer {OTHER_TENANT_KEY}"},
    )
    other = _affinity(http, upstream, request_id + "-d", **{"x-session-id": "session-43"})
    assert alpha is not None
    assert re.fullmatch(r"[0-9a-f]{32}", alpha)
    assert alpha_by_id == alpha
    assert beta is not None
    assert re.fullmatch(r"[0-9a-f]{32}", beta)
    assert beta != alpha
    assert other not in (alpha, None)


def test_no_session_header_the_prompt_family_is_the_key(
    http: httpx.Client, upstream: RunningSimulator, request_id: str
) -> None:
    # Without a session header the conversation's opening names it (gateway/routing/fingerprint.py).
    first = _affinity(http, upstream, request_id + "-a")
    assert first is not None
    assert re.fullmatch(r"[0-9a-f]{32}", first)
    assert _affinity(http, upstream, request_id + "-b") == first
    assert _affinity(http, upstream, request_id + "-c", **{"x-session-id": "session-42"}) != first
