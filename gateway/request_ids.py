"""Correlation ids: keep a well-formed client value, else mint one.

A minted id is `Verbatim`: logs, spans and the decision log carry it unscrubbed, so it is the
same everywhere. A client's value is plain text and is scrubbed like any other.
"""

from __future__ import annotations

import os
import re

from gateway.redaction.scrub import Verbatim

_WELL_FORMED = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}")


def request_id_from(client_value: str | None) -> str:
    if client_value and _WELL_FORMED.fullmatch(client_value):
        return client_value
    return Verbatim("req_" + os.urandom(16).hex())
