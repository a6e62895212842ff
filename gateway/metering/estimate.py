"""Token estimates, for reserving before the upstream counts and for settling when it did not.

The input bound is the serialized messages and tools (or embeddings input) in bytes / 3:
tokenizers for the models served here average about 4 bytes a token on text and JSON, so
the bound holds with room for chat-template tokens; image parts are counted by their
model's image rule (`images.py`), not as the bytes of their base64 text; it is what is reserved, never billed
when the upstream reports usage. A response without usage is counted at 4 characters a
token of generated text, capped at the output bound reserved.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from gateway.exchange import Endpoint, Exchange
from gateway.metering.images import ImageRule, image_urls

INPUT_BYTES_PER_TOKEN = 3
OUTPUT_CHARS_PER_TOKEN = 4
OUTPUT_PARAMS = (
    "max_completion_tokens",
    "max_tokens",
)  # the first present wins, as the simulator and OpenAI do


def input_tokens_bound(exchange: Exchange, image_rules: Sequence[ImageRule] = ()) -> int:
    """Text at INPUT_BYTES_PER_TOKEN; each image part by the dearest of `image_rules` (the
    rules of the models the request may go to), its URL's bytes not counted as text."""
    body = exchange.body
    images = 0
    if exchange.endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        text = orjson.dumps(messages)
        size = len(text)
        if image_rules and b'"image_url"' in text:
            for url in image_urls(messages):
                size -= len(url)
                images += max(rule.tokens(url) for rule in image_rules)
        tools = body.get("tools")
        if tools:
            size += len(orjson.dumps(tools))
    else:
        size = len(orjson.dumps(body.get("input")))
    return -(-size // INPUT_BYTES_PER_TOKEN) + images


def requested_output(body: dict[str, Any]) -> int | None:
    """The output cap the client asked for (validated by admit): the larger of max_tokens and
    max_completion_tokens when both are given, since an upstream may honour either."""
    values = [v for v in (body.get(name) for name in OUTPUT_PARAMS) if isinstance(v, int)]
    return max(values) if values else None


def bound_output(body: dict[str, Any], per_choice: int) -> None:
    """Write the reserved cap into the body sent upstream, in whichever parameters the
    client used (max_tokens when none), so the reservation is a real bound."""
    present = [name for name in OUTPUT_PARAMS if isinstance(body.get(name), int)]
    for name in present or ["max_tokens"]:
        body[name] = min(body.get(name) or per_choice, per_choice)


def produced_tokens(chars: int) -> int:
    return -(-chars // OUTPUT_CHARS_PER_TOKEN)


def generated_chars(choices: Any, part: str) -> int:
    """Characters of generated text (content, reasoning, tool-call arguments) in the
    `part` ("message" or "delta") of each choice."""
    total = 0
    for choice in choices if isinstance(choices, list) else ():
        message = choice.get(part) if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        for name in ("content", "reasoning_content", "reasoning"):
            text = message.get(name)
            if isinstance(text, str):
                total += len(text)
        calls = message.get("tool_calls")  # an upstream's odd value (not a list) counts nothing
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if isinstance(arguments, str):
                total += len(arguments)
    return total
