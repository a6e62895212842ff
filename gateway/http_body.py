"""Reading a request's body at the HTTP edge: within the body limit (declared or streamed),
inflated when the client compressed it, and the client's own deadline header checked."""

from __future__ import annotations

import math
import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from gateway.errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]

# zlib window bits: gzip framing, and zlib framing (what HTTP calls deflate)
_INFLATE_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


async def wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def read_body(receive: Receive, headers: dict[str, str], limit: int) -> bytes:
    declared = headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise InvalidRequest("Invalid Content-Length header.", code="invalid_content_length")
        if int(declared) > limit:
            raise _too_large(limit)
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        part: bytes = message.get("body", b"")
        if part:
            size += len(part)
            if size > limit:
                raise _too_large(limit)
            parts.append(part)
        if not message.get("more_body", False):
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body exceeds the gateway's limit of {limit} bytes.")


def request_timeout(value: str, configured: float) -> float:
    """The client may ask for a shorter deadline than configured, never a longer one."""
    try:
        asked = float(value)
    except ValueError:
        asked = math.nan
    if not math.isfinite(asked) or asked <= 0:
        raise InvalidRequest(
            f"Invalid X-Request-Timeout header {value[:40]!r}: give a positive number of seconds "
            f"(at most {configured:g}; a larger value means the gateway's own limit).",
            code="invalid_request_timeout",
        )
    return min(asked, configured)


def decoded(raw: bytes, headers: dict[str, str], limit: int) -> bytes:
    """The body without its Content-Encoding: gzip and deflate are inflated (never past the
    body limit, so a small compressed body cannot expand into a large one); others are refused."""
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("identity", ""):
        return raw
    wbits = _INFLATE_WBITS.get(encoding)
    if wbits is None:
        raise UnsupportedMediaType(
            f"Content-Encoding {encoding[:40]!r} is not supported: send the body uncompressed, "
            "or compressed with gzip or deflate.",
            code="unsupported_content_encoding",
        )
    inflater = zlib.decompressobj(wbits)
    try:
        body = inflater.decompress(raw, limit + 1)
    except zlib.error:
        raise InvalidRequest(
            f"The request body is not valid {encoding} data, as its Content-Encoding header says.",
            code="invalid_content_encoding",
        ) from None
    if len(body) > limit or inflater.unconsumed_tail:
        raise _too_large(limit)
    return body
