"""Request bodies and SSE parsing shared by the simulator's tests."""

from __future__ import annotations

from typing import Any

import orjson

LONG_SYSTEM = "You are a careful assistant. " * 12  # ~350 bytes: several 16-token blocks


def chat_body(*turns: str, **extra: Any) -> dict[str, Any]:
    """A chat body: a long system prompt then alternating user/assistant turns."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": LONG_SYSTEM}]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return {"model": "sim-model", "messages": messages, **extra}


def sse_data(text: str) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order."""
    return [line[len("data: ") :] for line in text.split("\n") if line.startswith("data: ")]


def sse_json(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(d) for d in sse_data(text) if d != "[DONE]"]
