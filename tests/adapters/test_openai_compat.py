"""The OpenAI-compatible adapter: what the upstream receives, and its failures as the client sees them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from simulator import RunningSimulator
from tests.harness import HELLO, chat_body, openai_error, recorded
from tests.servers import TEST_KEY, UPSTREAM_KEY

VENDOR_FIELDS: dict[str, Any] = {
    "temperature": 0.25,
    "top_k": 7,
    "repetition_penalty": 1.1,
    "chat_template_kwargs": {"enable_thinking": False},
    "x_vendor": {"nested": [1, {"a": None}, "two"], "flag": True},
    "metadata": {"team": "search"},
}


@pytest.mark.parametrize("stream", [False, True])
def test_body_passes_through_with_only_the_model_rewritten(
    http: httpx.Client, upstream: RunningSimulator, request_id: str, stream: bool
) -> None:
    body = chat_body(stream=stream, **VENDOR_FIELDS)
    response = http.post("/v1/chat/completions", json=body, headers={"x-request-id": request_id})
    assert response.status_code == 200
    [attempt] = recorded(upstream, request_id)
    expected = {**body, "model": "sim-model"}
    if stream:
        expected["stream_options"] = {"include_usage": True}
    assert attempt.body == expected
    assert attempt.path == "/v1/chat/completions"
    assert attempt.headers["content-type"] == "application/json"


def test_embeddings_body_passes_through(
    http: httpx.Client, upstream: RunningSimulator, request_id: str
) -> None:
    body = {"model": "embed", "input": ["a", "b"], "dimensions": 4, "user": "u-1"}
    response = http.post("/v1/embeddings", json=body, headers={"x-request-id": request_id})
    assert response.status_code == 200
    assert [len(d["embedding"]) for d in response.json()["data"]] == [4, 4]
    [attempt] = recorded(upstream, request_id)
    assert attempt.path == "/v1/embeddings"
    assert attempt.body == {**body, "model": "@cf/baai/bge-large-en-v1.5"}


def test_client_key_never_reaches_the_upstream(
    http: httpx.Client, upstream: RunningSimulator, request_id: str
) -> None:
    response = http.post(
        "/v1/chat/completions",
        json=chat_body(stream=True),
        headers={"x-request-id": request_id, "x-api-key": TEST_KEY, "cookie": "session=1"},
    )
    assert response.status_code == 200
    [attempt] = recorded(upstream, request_id)
    assert attempt.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert not [name for name, value in attempt.headers.items() if TEST_KEY in value]
    assert "cookie" not in attempt.headers
    assert attempt.headers["accept"] == "text/event-stream"


def test_upstream_refusing_the_gateways_credentials_is_502(
    http: httpx.Client, upstream: RunningSimulator, request_id: str
) -> None:
    response = http.post(
        "/v1/chat/completions", json=chat_body("misconfigured"), headers={"x-request-id": request_id}
    )
    error = openai_error(response, 502)
    assert error["code"] == "upstream_auth_failed"
    assert "'misconfigured'" in error["message"]
    [attempt] = recorded(upstream, request_id)
    assert attempt.status == 401
    assert attempt.headers["authorization"] == "Bearer not-the-upstream-key"


@pytest.mark.parametrize(
    ("fault", "stream", "status", "code"),
    [
        ({"kind": "malformed_chunk"}, False, 502, "upstream_malformed_response"),
        ({"kind": "disconnect"}, False, 503, "upstream_disconnected"),
        ({"kind": "malformed_chunk", "after_chunks": 0}, True, 502, "upstream_malformed_chunk"),
        ({"status": 404, "message": "no such model"}, False, 502, "upstream_not_found"),
        ({"status": 408}, False, 504, "upstream_timeout"),
        ({"status": 422, "message": "bad schema"}, True, 400, "upstream_rejected"),
    ],
)
def test_unusable_answers_before_any_chunk(
    http: httpx.Client,
    upstream: RunningSimulator,
    fault: dict[str, Any],
    stream: bool,
    status: int,
    code: str,
) -> None:
    body = {"model": "faulty", "messages": HELLO, "stream": stream, "x_sim": {"fault": fault}}
    error = openai_error(http.post("/v1/chat/completions", json=body), status)
    assert error["code"] == code
