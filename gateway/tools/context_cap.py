"""The context cap: tool outputs longer than `decision.limits.tool_output_max_chars` are
cut before the upstream sees them, with a visible marker so that the model (and whoever
reads the transcript) knows the output is incomplete.

A string content keeps its first `max` characters and gets the marker appended; a list
of content parts keeps text parts up to `max` characters in all, cuts the part that
crosses the limit, drops the text parts after it and appends the marker as a text part.
"""

from __future__ import annotations

from typing import Any

from gateway.exchange import Endpoint, Exchange

_TOOL_ROLES = ("tool", "function")


def truncation_marker(original: int, kept: int) -> str:
    return f"\n[tollgate: tool output truncated from {original} to {kept} characters]"


class ContextCap:
    name = "context_cap"

    async def __call__(self, exchange: Exchange) -> None:
        decision = exchange.decision
        if decision is None or exchange.endpoint is not Endpoint.CHAT:
            return
        limit = decision.limits.tool_output_max_chars
        if limit is None:
            return
        for message in exchange.body.get("messages") or ():
            if isinstance(message, dict) and message.get("role") in _TOOL_ROLES:
                content = message.get("content")
                if isinstance(content, str) and len(content) > limit:
                    message["content"] = content[:limit] + truncation_marker(len(content), limit)
                elif isinstance(content, list):
                    _cap_parts(message, content, limit)


def _cap_parts(message: dict[str, Any], parts: list[Any], limit: int) -> None:
    texts = [p for p in parts if _is_text(p)]
    total = sum(len(p["text"]) for p in texts)
    if total <= limit:
        return
    kept: list[Any] = []
    room = limit
    for part in parts:
        if not _is_text(part):
            kept.append(part)
        elif room > 0:
            kept.append({**part, "text": part["text"][:room]})
            room -= len(kept[-1]["text"])
    kept.append({"type": "text", "text": truncation_marker(total, limit)})
    message["content"] = kept


def _is_text(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
