"""Upstream HTTP failures -> the gateway's UpstreamError family."""

from __future__ import annotations

import pytest

from adapters.upstream.errors import from_status, openai_error_message, retry_after_seconds
from gateway.errors import UpstreamRejected, UpstreamTimeout, UpstreamUnavailable


@pytest.mark.parametrize(
    ("upstream_status", "status", "code", "retryable"),
    [
        (400, 400, "upstream_rejected", False),
        (413, 413, "upstream_rejected", False),
        (422, 400, "upstream_rejected", False),
        (401, 502, "upstream_auth_failed", False),
        (403, 502, "upstream_auth_failed", False),
        (404, 502, "upstream_not_found", False),
        (408, 504, "upstream_timeout", True),
        (504, 504, "upstream_timeout", True),
        (429, 429, "upstream_rate_limited", True),
        (502, 503, "upstream_unavailable", True),
        (503, 503, "upstream_unavailable", True),
        (500, 502, "upstream_error", True),
        (418, 502, "upstream_error", False),
    ],
)
def test_from_status(upstream_status: int, status: int, code: str, retryable: bool) -> None:
    error = from_status("up", upstream_status, "why", None)
    assert (error.status, error.code, error.retryable) == (status, code, retryable)
    assert error.upstream == "up"
    assert "'up'" in error.message


def test_rejection_keeps_the_upstreams_message() -> None:
    error = from_status("up", 400, "'n' must be 1", None)
    assert isinstance(error, UpstreamRejected)
    assert error.message == "Upstream 'up' rejected the request (HTTP 400): 'n' must be 1"
    # The upstream's refusal, told apart from the gateway's own invalid_request_error.
    assert (error.body()["error"]["type"], error.code) == ("upstream_error", "upstream_rejected")


def test_credentials_failure_does_not_echo_the_upstreams_message() -> None:
    error = from_status("up", 401, "Incorrect API key provided: sk-abc", None)
    assert "sk-abc" not in error.message


@pytest.mark.parametrize("upstream_status", [429, 503])
def test_retry_after_becomes_a_header(upstream_status: int) -> None:
    error = from_status("up", upstream_status, None, 12.6)
    assert isinstance(error, UpstreamUnavailable)
    assert error.headers == {"retry-after": "13"}


def test_timeout_without_retry_after() -> None:
    error = from_status("up", 408, None, 5)
    assert isinstance(error, UpstreamTimeout)
    assert error.headers == {}


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),
        ({"retry-after": "-3"}, None),
        ({}, None),
    ],
)
def test_retry_after_seconds(headers: dict[str, str], seconds: float | None) -> None:
    assert retry_after_seconds(headers) == seconds


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error": {"message": "bad things", "type": "x"}}', "bad things"),
        (b'{"error": "plain text error"}', "plain text error"),
        (b'{"detail": "fastapi style"}', None),
        (b"<html>502 Bad Gateway</html>", None),
        (b"", None),
        (b'{"error": {"message": "' + b"m" * 900 + b'"}}', "m" * 500),
    ],
)
def test_openai_error_message(body: bytes, message: str | None) -> None:
    assert openai_error_message(body) == message
