"""The HTTP edge: request ids, body limits, methods and paths, health endpoints, and the
OpenAI error format on every error it answers."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import openai
import pytest

from simulator import RunningSimulator
from tests.conftest import MAX_BODY_BYTES
from tests.harness import HELLO, chat_body, openai_error, recorded
from tests.servers import TEST_KEY, RunningGateway

MINTED = re.compile(r"req_[0-9a-f]{32}")
AUTH = {"authorization": f"Bearer {TEST_KEY}"}


def _oversized_body() -> bytes:
    return b'{"model": "chat", "messages": [{"role": "user", "content": "' + b"x" * MAX_BODY_BYTES + b'"}]}'


# Request ids


@pytest.mark.parametrize("stream", [False, True])
def test_well_formed_request_id_is_kept_forwarded_and_echoed(
    http: httpx.Client, upstream: RunningSimulator, stream: bool
) -> None:
    request_id = f"trace-{stream}.Z:01_a-b"
    response = http.post(
        "/v1/chat/completions", json=chat_body(stream=stream), headers={"x-request-id": request_id}
    )
    assert response.status_code == 200
    assert response.headers["x-request-id"] == request_id
    [attempt] = recorded(upstream, request_id)
    assert attempt.path == "/v1/chat/completions"


@pytest.mark.parametrize("client_value", ["has spaces", "x" * 200, "-leading-dash", "semi;colon", "é"])
def test_malformed_request_id_is_replaced(
    http: httpx.Client, upstream: RunningSimulator, client_value: str
) -> None:
    response = http.post(
        "/v1/chat/completions", json=chat_body(), headers={"x-request-id": client_value.encode()}
    )
    assert response.status_code == 200
    minted = response.headers["x-request-id"]
    assert MINTED.fullmatch(minted)
    assert len(recorded(upstream, minted)) == 1  # the upstream saw the same, minted id


def test_request_id_is_minted_when_absent(client: openai.OpenAI, upstream: RunningSimulator) -> None:
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=HELLO)
    minted = raw.headers["x-request-id"]
    assert MINTED.fullmatch(minted)
    assert raw.parse().choices[0].message.content
    assert len(recorded(upstream, minted)) == 1


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/v1/chat/completions", b"{not json", 400),
        ("POST", "/v1/chat/completions", b'{"model": "nope", "messages": [{"role": "user"}]}', 404),
        ("POST", "/v1/nowhere", b"", 404),
        ("GET", "/v1/chat/completions", b"", 405),
        ("POST", "/v1/chat/completions", _oversized_body(), 413),
    ],
)
def test_errors_carry_the_request_id(
    http: httpx.Client, method: str, path: str, body: bytes, status: int
) -> None:
    kept = http.request(method, path, content=body, headers={"x-request-id": "err-1"})
    openai_error(kept, status)
    assert kept.headers["x-request-id"] == "err-1"
    minted = http.request(method, path, content=body, headers={"x-request-id": "bad id"})
    openai_error(minted, status)
    assert MINTED.fullmatch(minted.headers["x-request-id"])


def test_401_carries_the_request_id(gateway: RunningGateway) -> None:
    response = httpx.post(
        gateway.url + "/v1/chat/completions", json=chat_body(), headers={"x-request-id": "no-key-1"}
    )
    openai_error(response, 401)
    assert response.headers["x-request-id"] == "no-key-1"


# Body size


def test_body_over_the_limit_with_content_length_is_413(
    http: httpx.Client, upstream: RunningSimulator
) -> None:
    error = openai_error(http.post("/v1/chat/completions", content=_oversized_body()), 413)
    assert error["code"] == "request_too_large"
    assert error["type"] == "invalid_request_error"
    assert str(MAX_BODY_BYTES) in error["message"]
    assert upstream.requests == []


def _chunked(body: bytes, size: int = 1000) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_body_over_the_limit_chunked_is_413(http: httpx.Client, upstream: RunningSimulator) -> None:
    request = http.build_request("POST", "/v1/chat/completions", content=_chunked(_oversized_body()))
    assert request.headers["transfer-encoding"] == "chunked"
    assert "content-length" not in request.headers
    error = openai_error(http.send(request), 413)
    assert error["code"] == "request_too_large"
    assert upstream.requests == []


def test_chunked_body_under_the_limit_is_read_whole(http: httpx.Client, upstream: RunningSimulator) -> None:
    content = (
        b'{"model": "chat", "x_sim": {"echo": true}, "messages": [{"role": "user", "content": "'
        + b"y" * 5000
        + b'"}]}'
    )
    request = http.build_request("POST", "/v1/chat/completions", content=_chunked(content, 700))
    assert request.headers["transfer-encoding"] == "chunked"
    response = http.send(request)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "y" * 5000


def test_oversized_request_raises_in_openai_client(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "z" * MAX_BODY_BYTES}]
        )
    assert caught.value.status_code == 413
    assert caught.value.code == "request_too_large"


# Methods and paths


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/chat/completions"),
        ("PUT", "/v1/embeddings"),
        ("POST", "/v1/models"),
        ("DELETE", "/healthz"),
        ("POST", "/readyz"),
    ],
)
def test_wrong_method_is_405(http: httpx.Client, method: str, path: str) -> None:
    error = openai_error(http.request(method, path), 405)
    assert error["code"] == "method_not_allowed"
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize("path", ["/v1/completions", "/v2/chat/completions", "/", "/v1/chat/completions/"])
def test_unknown_path_is_404(http: httpx.Client, path: str) -> None:
    error = openai_error(http.post(path, json=chat_body()), 404)
    assert error["code"] == "unknown_url"


# Health


def test_healthz(gateway: RunningGateway) -> None:
    response = httpx.get(gateway.url + "/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_reports_each_upstream(gateway: RunningGateway, upstream: RunningSimulator) -> None:
    response = httpx.get(gateway.url + "/readyz", timeout=10)
    assert response.status_code == 200
    report = response.json()
    assert report["status"] == "ready"
    assert report["upstreams"] == {
        "local": "up",
        "backup": "up",
        "dead": "down",
        "impatient": "up",
        "paced": "up",
        "misconfigured": "up",
        "faulty": "up",
    }
    # Each replica by its index (never its address): the answer now, and what the pool knows.
    assert set(report["replicas"]) == set(report["upstreams"])
    [dead] = report["replicas"]["dead"]
    assert dead == {
        "replica": 0,
        "health": "unreachable",
        "circuit": "closed",
        "in_flight": 0,
        "last_probe": None,
    }
    upstream.faults.down(1)
    report = httpx.get(gateway.url + "/readyz", timeout=10).json()
    assert report["upstreams"]["backup"] == "down"
    assert report["replicas"]["backup"][0]["health"] == "unreachable"
    assert report["upstreams"]["local"] == "up"
    upstream.faults.up(1)
    assert httpx.get(gateway.url + "/readyz", timeout=10).json()["upstreams"]["backup"] == "up"
