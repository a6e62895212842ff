"""Named server-sent events, as the Responses and Messages APIs send them."""

from __future__ import annotations

from typing import Any

import orjson


def named_event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
