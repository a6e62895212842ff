"""A stored response's input items (`GET /v1/responses/{id}/input_items`, the `openai` SDK's
`responses.input_items.list`): the `input` of the request that made it, as items with ids.

A string input is one user message; a message given as `{"role", "content": "..."}` gets its
text as one `input_text` part (`output_text` for an assistant's); every item gets an `id`
(when it had none) and `status: completed`. Listed newest first unless `order=asc`, `limit`
(1 to 100, default 20) at a time, from after (or before) an item's id.
"""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import parse_qs

from gateway.errors import InvalidRequest

_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}
_DEFAULT_LIMIT = 20
_MAX_LIMIT = 100


def input_items(raw: Any) -> list[dict[str, Any]]:
    """The request's `input` (already validated by the translation) as listed items."""
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    if not isinstance(raw, list):
        return []
    return [_item(item) for item in raw if isinstance(item, dict)]


def _item(given: dict[str, Any]) -> dict[str, Any]:
    item = dict(given)
    kind = item.setdefault("type", "message")  # the short form of a message has no type
    content = item.get("content")
    if kind == "message" and isinstance(content, str):
        part = "output_text" if item.get("role") == "assistant" else "input_text"
        text_part: dict[str, Any] = {"type": part, "text": content}
        if part == "output_text":
            text_part["annotations"] = []
        item["content"] = [text_part]
    if not isinstance(item.get("id"), str) or not item["id"]:
        item["id"] = f"{_PREFIXES.get(kind, 'item')}_{secrets.token_hex(12)}"
    item.setdefault("status", "completed")
    return item


def page(items: list[dict[str, Any]], query: str) -> dict[str, Any]:
    """One page of a response's input items, as the `list` object OpenAI answers."""
    params = {name: values[-1] for name, values in parse_qs(query).items()}
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order", code="invalid_value")
    limit = _limit(params.get("limit"))
    ordered = items if order == "asc" else items[::-1]
    ids = [item["id"] for item in ordered]
    start, end = 0, len(ordered)
    if "after" in params:
        start = _position(ids, params["after"], "after") + 1
    if "before" in params:
        end = _position(ids, params["before"], "before")
    window = ordered[start:end]
    data = window[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(window) > limit,
    }


def _limit(raw: str | None) -> int:
    if raw is None:
        return _DEFAULT_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= _MAX_LIMIT:
        raise InvalidRequest(
            f"'limit' must be a whole number from 1 to {_MAX_LIMIT}.", param="limit", code="invalid_value"
        )
    return int(raw)


def _position(ids: list[str], wanted: str, param: str) -> int:
    try:
        return ids.index(wanted)
    except ValueError:
        raise InvalidRequest(
            f"No input item '{wanted[:64]}' in this response.", param=param, code="invalid_value"
        ) from None
