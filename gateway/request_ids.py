"""Correlation ids: the client's, the gateway's, and the one an upstream is sent.

`request_id_from` keeps a well-formed client `X-Request-ID` (echoed back to that client, and
scrubbed like any client text wherever it is written) or mints one. A minted id is
`Verbatim`: logs, spans and the decision log carry it unscrubbed, so it is the same everywhere.

An upstream never sees the client's text: `UpstreamIds` derives a UUID from the request id
(HMAC-SHA256 under the gateway's key, laid out as a version 4 UUID, which every
OpenAI-compatible server accepts; llama-cpp-python refuses anything that is not a UUID). The
same request id gives the same UUID under the same key (every attempt of a request, every
replica sharing `server.request_id_key`), and the UUID says nothing about the text it came
from. `upstream_form` writes it as an upstream's config asks.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from typing import Literal

from gateway.random_ids import random_hex
from gateway.redaction.marks import Verbatim

_WELL_FORMED = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}")

UpstreamIdFormat = Literal["uuid", "gateway"]


def request_id_from(client_value: str | None) -> str:
    if client_value and _WELL_FORMED.fullmatch(client_value):
        return client_value
    return Verbatim("req_" + random_hex(16))


class UpstreamIds:
    """The UUID sent upstream for a request id, derived under one key."""

    __slots__ = ("_mac",)

    def __init__(self, key: bytes | None = None) -> None:
        # Keyed once: each id copies the keyed state instead of keying HMAC again.
        self._mac = hmac.new(key if key is not None else os.urandom(32), digestmod=hashlib.sha256)

    def __call__(self, request_id: str) -> str:
        mac = self._mac.copy()
        mac.update(request_id.encode("utf-8", "surrogatepass"))
        raw = bytearray(mac.digest()[:16])
        raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
        raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
        h = raw.hex()
        # Gateway-made hex: never scrubbed, so the id logged is the id the upstream logged.
        return Verbatim(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")


def upstream_form(upstream_id: str, form: UpstreamIdFormat) -> str:
    """`upstream_id` (a UUID) as sent: `uuid` as it is, `gateway` as `req_` and 32 hex digits."""
    return upstream_id if form == "uuid" else "req_" + upstream_id.replace("-", "")
