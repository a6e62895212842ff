"""Reading guarded chat chunks in a door's stream encoder.

Most chunks of a stream only add to the block a door has open: more "content" text, or more
"arguments" of the tool call it is writing. `more_text` and `more_arguments` read those from
a chunk's data, and return None for anything else (another field, a new call, a finish,
several choices), which the caller then reads in full. They are the encoders' fast path, run
for nearly every chunk, so each is one call with the shared checks written out in both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# What a chunk adds to the open block, or None: (the chunk's data, the open call's chat index)
MoreReader = Callable[[dict[str, Any], Any], "str | None"]


def more_text(data: dict[str, Any], call_index: Any = None) -> str | None:
    """The text a chunk adds when its only choice is `{"delta": {"content": "..."}}` and nothing else."""
    choices = data.get("choices")
    if choices.__class__ is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if choice.__class__ is not dict or choice.get("finish_reason") is not None or choice.get("index"):
        return None
    delta = choice.get("delta")
    if delta.__class__ is not dict or len(delta) != 1:
        return None
    value = delta.get("content")
    return value if value.__class__ is str and value else None


def more_arguments(data: dict[str, Any], call_index: Any) -> str | None:
    """The arguments a chunk adds to the call at `call_index`, when that is all it does."""
    choices = data.get("choices")
    if choices.__class__ is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if choice.__class__ is not dict or choice.get("finish_reason") is not None or choice.get("index"):
        return None
    delta = choice.get("delta")
    if delta.__class__ is not dict or len(delta) != 1:
        return None
    calls = delta.get("tool_calls")
    if calls.__class__ is not list or len(calls) != 1 or calls[0].__class__ is not dict:
        return None
    call = calls[0]
    function = call.get("function")
    if call.get("index", 0) != call_index or call.get("id") or function.__class__ is not dict:
        return None
    value = function.get("arguments") if len(function) == 1 else None
    return value if value.__class__ is str and value else None
