"""Requests a new user sends by mistake or by habit get a clear answer, never silence: a
malformed X-Request-Timeout, a compressed body, an absurd `n`, an admin endpoint that is not
configured, and a W3C trace context that must reach the upstream even with tracing off."""

from __future__ import annotations

import gzip
import zlib

import httpx
import orjson
import pytest

from simulator import RunningSimulator
from tests.harness import chat_body, openai_error, recorded

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon", ""])
def test_a_request_timeout_that_is_not_a_positive_number_is_refused(http: httpx.Client, value: str) -> None:
    response = http.post("/v1/chat/completions", json=chat_body(), headers={"x-request-timeout": value})
    error = openai_error(response, 400)
    assert error["code"] == "invalid_request_timeout"
    assert "X-Request-Timeout" in error["message"]


@pytest.mark.parametrize("value", ["2.5", "30", "100000"])
def test_a_positive_request_timeout_is_served(http: httpx.Client, value: str) -> None:
    response = http.post("/v1/chat/completions", json=chat_body(), headers={"x-request-timeout": value})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("GZIP", gzip.compress), ("identity", bytes)],
)
def test_a_compressed_body_is_decoded(
    http: httpx.Client, upstream: RunningSimulator, request_id: str, encoding: str, compress: object
) -> None:
    assert callable(compress)
    body = compress(orjson.dumps(chat_body()))
    response = http.post(
        "/v1/chat/completions",
        content=body,
        headers={
            "content-encoding": encoding,
            "content-type": "application/json",
            "x-request-id": request_id,
        },
    )
    assert response.status_code == 200, response.text
    [sent] = recorded(upstream, request_id)
    assert sent.body["messages"] == chat_body()["messages"]


def test_an_unsupported_content_encoding_is_refused_with_415(http: httpx.Client) -> None:
    response = http.post("/v1/chat/completions", content=b"\x1b\x00\x00", headers={"content-encoding": "br"})
    error = openai_error(response, 415)
    assert error["code"] == "unsupported_content_encoding"
    assert "'br'" in error["message"]


def test_a_body_that_is_not_what_its_encoding_says_is_refused(http: httpx.Client) -> None:
    response = http.post(
        "/v1/chat/completions", content=orjson.dumps(chat_body()), headers={"content-encoding": "gzip"}
    )
    error = openai_error(response, 400)
    assert error["code"] == "invalid_content_encoding"


def test_a_small_body_that_inflates_past_the_limit_is_refused(http: httpx.Client) -> None:
    bomb = gzip.compress(b'{"model": "chat", "messages": "' + b"a" * 10_000_000 + b'"}')
    assert len(bomb) < 16 * 1024  # under the gateway's body limit before decoding
    error = openai_error(
        http.post("/v1/chat/completions", content=bomb, headers={"content-encoding": "gzip"}), 413
    )
    assert error["code"] == "request_too_large"


@pytest.mark.parametrize("n", [129, 1_000_000])
def test_n_past_openais_bound_is_refused_before_the_upstream(
    http: httpx.Client, upstream: RunningSimulator, request_id: str, n: int
) -> None:
    response = http.post("/v1/chat/completions", json=chat_body(n=n), headers={"x-request-id": request_id})
    error = openai_error(response, 400)
    assert error["param"] == "n"
    assert "at most 128" in error["message"]
    assert recorded(upstream, request_id) == []


def test_admin_spend_without_its_configuration_says_what_it_needs(http: httpx.Client) -> None:
    error = openai_error(http.get("/admin/spend"), 404)
    assert error["code"] == "admin_spend_not_configured"
    assert "admin" in error["message"]
    assert "state" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_clients_trace_context_goes_upstream_with_tracing_off(
    http: httpx.Client, upstream: RunningSimulator, request_id: str, stream: bool
) -> None:
    headers = {"x-request-id": request_id, "traceparent": TRACEPARENT, "tracestate": "vendor=opaque"}
    response = http.post("/v1/chat/completions", json=chat_body(stream=stream), headers=headers)
    assert response.status_code == 200
    [sent] = recorded(upstream, request_id)
    assert sent.headers["traceparent"] == TRACEPARENT
    assert sent.headers["tracestate"] == "vendor=opaque"


@pytest.mark.parametrize(
    "malformed",
    [
        f"00-{'0' * 32}-00f067aa0ba902b7-01",  # all-zero trace id
        f"ff-{TRACE_ID}-00f067aa0ba902b7-01",  # version ff
        f"00-{TRACE_ID.upper()}-00f067aa0ba902b7-01",  # upper-case hex
        f"00-{TRACE_ID}-00f067aa0ba902b7-01-extra",  # version 00 has four fields
        "not a traceparent",
    ],
)
def test_a_malformed_trace_context_is_not_passed_on(
    http: httpx.Client, upstream: RunningSimulator, request_id: str, malformed: str
) -> None:
    headers = {"x-request-id": request_id, "traceparent": malformed}
    assert http.post("/v1/chat/completions", json=chat_body(), headers=headers).status_code == 200
    [sent] = recorded(upstream, request_id)
    assert "traceparent" not in sent.headers


def test_a_later_versions_trace_context_is_passed_on_as_version_00(
    http: httpx.Client, upstream: RunningSimulator, request_id: str
) -> None:
    headers = {"x-request-id": request_id, "traceparent": f"01-{TRACE_ID}-00f067aa0ba902b7-01-future"}
    assert http.post("/v1/chat/completions", json=chat_body(), headers=headers).status_code == 200
    [sent] = recorded(upstream, request_id)
    assert sent.headers["traceparent"] == TRACEPARENT
