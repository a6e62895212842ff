"""Reading guarded chat chunks in a door's stream encoder."""

from __future__ import annotations

from typing import Any


def continued(choices: list[Any], what: str | None, call_index: Any) -> str | None:
    """What a chunk adds to the block a door has open, when that is all it does: more
    "content" text, or more "arguments" of the tool call at `call_index`; None for anything
    else (another field, a new call, a finish, several choices), which the caller reads in
    full. Most chunks of a stream are one of these, so this is the encoders' fast path."""
    if what is None or len(choices) != 1:
        return None
    choice = choices[0]
    if choice.__class__ is not dict or choice.get("finish_reason") is not None or choice.get("index"):
        return None
    delta = choice.get("delta")
    if not delta or len(delta) != 1:
        return None
    if what == "content":
        value = delta.get("content")
    else:
        calls = delta.get("tool_calls")
        if not calls or len(calls) != 1 or calls[0].__class__ is not dict:
            return None
        call = calls[0]
        function = call.get("function")
        if call.get("index", 0) != call_index or call.get("id") or function.__class__ is not dict:
            return None
        value = function.get("arguments") if len(function) == 1 else None
    return value if value and value.__class__ is str else None
