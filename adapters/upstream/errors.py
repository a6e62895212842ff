"""Upstream HTTP failures -> the gateway's UpstreamError family.

The rule: a client learns what it can act on. A request the upstream refused (400, 413,
422) keeps its 4xx and the upstream's message, named as the upstream's refusal (type
upstream_error, code upstream_rejected) and not the gateway's: the gateway accepted it, and
the cause may be the client's or only that server's (a parameter or size another server
takes), so the next candidate is tried. A failure of the gateway's own set-up (credentials,
model ids, plan) is a 502 that names the upstream, so a client key is never blamed for the
gateway's credentials.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import UpstreamError, UpstreamRejected, UpstreamTimeout, UpstreamUnavailable

_MAX_MESSAGE = 500


def from_status(upstream: str, status: int, message: str | None, retry_after: float | None) -> UpstreamError:
    detail = f": {message}" if message else "."
    if status in (400, 413, 422):
        return UpstreamRejected(
            f"Upstream {upstream!r} rejected the request (HTTP {status}){detail}",
            status=400 if status == 422 else status,
            upstream=upstream,
        )
    if status in (401, 403):
        return UpstreamError(
            f"Upstream {upstream!r} refused the gateway's credentials.",
            code="upstream_auth_failed",
            upstream=upstream,
        )
    if status == 404:
        return UpstreamError(
            f"Upstream {upstream!r} does not know the configured model or path{detail}",
            code="upstream_not_found",
            upstream=upstream,
        )
    if status in (408, 504):
        return UpstreamTimeout(f"Upstream {upstream!r} timed out.", upstream=upstream)
    if status == 429:
        return UpstreamUnavailable(
            f"Upstream {upstream!r} is rate limiting the gateway; retry later.",
            status=429,
            code="upstream_rate_limited",
            retry_after=retry_after,
            upstream=upstream,
        )
    if status in (502, 503):
        return UpstreamUnavailable(
            f"Upstream {upstream!r} is unavailable.", retry_after=retry_after, upstream=upstream
        )
    return UpstreamError(
        f"Upstream {upstream!r} failed with HTTP {status}.", retryable=status >= 500, upstream=upstream
    )


def retry_after_seconds(headers: dict[str, str]) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: rare from model servers, and not worth a parser
    return seconds if seconds >= 0 else None


def openai_error_message(body: bytes) -> str | None:
    """The message of an OpenAI-format error body, trimmed; None if there is none."""
    data = safe_json(body)
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if isinstance(message, str):
        return message[:_MAX_MESSAGE]
    if isinstance(error, str):
        return error[:_MAX_MESSAGE]
    return None


def safe_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def malformed(upstream: str) -> UpstreamError:
    return UpstreamError(
        f"Upstream {upstream!r} sent a response that is not valid JSON.",
        code="upstream_malformed_response",
        upstream=upstream,
    )
