"""The typical token count of a request's input, for context windows and input ceilings:
its serialized messages and tools at 4 bytes a token, the average of the tokenizers of the
models served here on text and JSON. (Budgets reserve a stricter upper bound,
gateway/metering/estimate.py; a window checked with it would refuse prompts that fit.)"""

from __future__ import annotations

from typing import Any

import orjson

BYTES_PER_TOKEN = 4


def typical_input_tokens(body: dict[str, Any]) -> int:
    size = len(orjson.dumps(body.get("messages")))
    tools = body.get("tools")
    if tools:
        size += len(orjson.dumps(tools))
    return -(-size // BYTES_PER_TOKEN)


def message_tokens(messages: list[Any]) -> int:
    return -(-len(orjson.dumps(messages)) // BYTES_PER_TOKEN)
