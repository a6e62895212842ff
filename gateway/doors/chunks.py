"""Reading guarded chat chunks in a door's stream encoder.

Most chunks of a stream only add to the block a door has open: more "content" text, or more
"arguments" of the tool call it is writing. `more_text` and `more_arguments` read those from
a chunk, and return None for anything else (another field, a new call, a finish, several
choices), which the caller then reads in full. They are the encoders' fast path, run for
nearly every chunk, so they take the shortest way to the answer:

- a text chunk's shape was worked out by the first guard to look at it (the produced-text
  count asks every chunk for `Chunk.text_delta`, and the result is kept on the chunk); a
  chunk no guard changed since (not `dirty`) is read from that, without a second look;
- otherwise the chunk's data is indexed and unpacked in the shape expected, and a chunk of
  any other shape fails the look-up (KeyError, TypeError, ValueError) rather than have each
  level's type tested first: a reply's text chunks never raise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.ports import Chunk

# What a chunk adds to the open block, or None: (the chunk, the open call's chat index)
MoreReader = Callable[[Chunk, Any], "str | None"]
_OTHER_SHAPE = (KeyError, TypeError, ValueError)


def more_text(chunk: Chunk, call_index: Any = None) -> str | None:
    """The text a chunk adds when its only choice is `{"delta": {"content": "..."}}` and nothing else."""
    if not chunk.dirty:  # the guards' look still holds
        plain = chunk.text_delta()
        if plain is None:
            return None
        choice, field, text = plain
        return text if field == "content" and not choice.get("index") else None
    try:
        (choice,) = chunk.data["choices"]
        delta = choice["delta"]
        if len(delta) == 1 and choice.get("finish_reason") is None and not choice.get("index"):
            value = delta["content"]
            if value.__class__ is str and value:
                return value
    except _OTHER_SHAPE:
        pass
    return None


def more_arguments(chunk: Chunk, call_index: Any) -> str | None:
    """The arguments a chunk adds to the call at `call_index`, when that is all it does."""
    try:
        (choice,) = chunk.data["choices"]
        delta = choice["delta"]
        if len(delta) == 1 and choice.get("finish_reason") is None and not choice.get("index"):
            (call,) = delta["tool_calls"]
            function = call["function"]
            if len(function) == 1 and call.get("index", 0) == call_index and not call.get("id"):
                value = function["arguments"]
                if value.__class__ is str and value:
                    return value
    except _OTHER_SHAPE:
        pass
    return None
