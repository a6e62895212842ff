"""Every text a request carries, and the request mode applied to each.

Chat: every message's content (a string, or the `text` of each content part), whatever
its role, so tool results too; each assistant tool call's `function.arguments` (JSON
text) and a legacy `function_call.arguments`; with `scan_tool_descriptions`, each
tool's `description` and every `description` inside its parameter schema.
Embeddings: `input`, a string or a list of strings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson

from gateway.errors import SensitiveDataBlocked
from gateway.exchange import Endpoint
from gateway.redaction.detector import Found, replaced
from gateway.redaction.scrub import marker
from gateway.redaction.state import RedactionState
from gateway.redaction.tokens import Vault, placeholders_in

# Where a text sits: its container and key, and whether it is JSON text (tool arguments).
Slot = tuple[dict[str, Any] | list[Any], Any, bool]


def text_slots(endpoint: Endpoint, body: dict[str, Any], tool_descriptions: bool) -> Iterator[Slot]:
    if endpoint is Endpoint.EMBEDDINGS:
        value = body.get("input")
        if isinstance(value, str):
            yield body, "input", False
        elif isinstance(value, list):
            yield from ((value, i, False) for i, item in enumerate(value) if isinstance(item, str))
        return
    for message in body.get("messages") or ():
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            yield message, "content", False
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield part, "text", False
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                yield function, "arguments", True
        legacy = message.get("function_call")
        if isinstance(legacy, dict) and isinstance(legacy.get("arguments"), str):
            yield legacy, "arguments", True
    if tool_descriptions:
        for tool in body.get("tools") or ():
            function = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(function, dict):
                yield from _descriptions(function)


def _descriptions(node: dict[str, Any]) -> Iterator[Slot]:
    for key, value in node.items():
        if key == "description" and isinstance(value, str):
            yield node, key, False
        elif isinstance(value, dict):
            yield from _descriptions(value)
        elif isinstance(value, list):
            yield from (s for item in value if isinstance(item, dict) for s in _descriptions(item))


def redact_request(
    endpoint: Endpoint, body: dict[str, Any], state: RedactionState, tool_descriptions: bool
) -> None:
    """Apply the request mode to every text of `body`, in place; raise SensitiveDataBlocked for
    `block`. Kinds found are counted in `state.found` (kinds only, never values)."""
    mode = state.rules.request
    detector = state.detector
    slots = list(text_slots(endpoint, body, tool_descriptions))
    if mode == "block":
        for container, key, _ in slots:
            state.found.update(found.kind for found in detector.find_remembered(container[key]))
        if state.found:
            raise SensitiveDataBlocked(sorted(state.found))
        return
    replacement: Callable[[Found, str], str]
    if mode == "tokenize":
        vault = Vault(p for container, key, _ in slots for p in placeholders_in(container[key]))
        state.vault = vault
    for container, key, in_json in slots:
        text = container[key]
        found = detector.find_remembered(text)
        if not found:
            continue
        state.found.update(item.kind for item in found)
        if mode == "mask":
            replacement = marker
        elif in_json:
            replacement = _json_tokenizer(vault)
        else:
            replacement = _tokenizer(vault)
        container[key] = replaced(text, found, replacement)


def _tokenizer(vault: Vault) -> Callable[[Found, str], str]:
    return lambda found, value: vault.placeholder(found.kind, value)


def _json_tokenizer(vault: Vault) -> Callable[[Found, str], str]:
    def replace(found: Found, value: str) -> str:
        # The vault keeps values as the client wrote them; inside JSON text they are escaped.
        if "\\" in value:
            try:
                decoded = orjson.loads(f'"{value}"')
            except orjson.JSONDecodeError:
                decoded = value
            if isinstance(decoded, str):
                value = decoded
        return vault.placeholder(found.kind, value)

    return replace
