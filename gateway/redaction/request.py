"""Every text a request carries, and the request mode applied to each.

Every string the upstream receives is scanned, found by walking the body rather than by a
list of fields, so a field added tomorrow (or a server's own extension) is covered too:
messages (content strings and content parts, `name`, `refusal`, whatever else a message
holds, whatever its role), the top-level `user`, `metadata` values, `prediction`, embeddings
`input`, unknown fields. What is left alone:

- structural values, which say what something is and never what anyone wrote: the keys in
  `STRUCTURAL` (model, role, type, ids, enums, tool_choice, stop sequences) at any depth, and
  the names in function objects (a tool call's `function`, a legacy `function_call`);
- payloads that are not text: `image_url` and `input_audio` parts, `file_data`, `file_id`,
  and any `data:` URL (base64 is not prose, and a scan could take its characters for a key);
- tool definitions (`tools`, legacy `functions`) and `response_format` schemas: the
  developer's schema, not user data; with `scan_tool_descriptions`, each `description` in them
  is scanned.

Tool-call `function.arguments` (and a legacy `function_call.arguments`) are JSON text: values
are tokenised unescaped there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson

from gateway.errors import SensitiveDataBlocked
from gateway.exchange import Endpoint
from gateway.redaction.detector import Found, replaced
from gateway.redaction.scrub import marker
from gateway.redaction.seen import MIN_CHARS
from gateway.redaction.state import RedactionState
from gateway.redaction.tokens import Vault, placeholders_in

# Where a text sits: its container and key, and whether it is JSON text (tool arguments).
Slot = tuple[dict[str, Any] | list[Any], Any, bool]

STRUCTURAL = frozenset(
    {
        "model",
        "role",
        "type",
        "id",
        "tool_call_id",
        "object",
        "detail",
        "format",
        "voice",
        "encoding_format",
        "modalities",
        "reasoning_effort",
        "service_tier",
        "tool_choice",
        "stop",
    }
)
"""Keys whose string values are structure (names of things, enums, ids): never scanned."""

NOT_TEXT = frozenset({"image_url", "input_audio", "file_data", "file_id"})
"""Keys whose values are addresses or encoded binary data: never scanned as text."""

SCHEMAS = frozenset({"tools", "functions", "response_format"})
"""Top-level keys holding the developer's schemas: only their descriptions, and only when asked."""

FUNCTIONS = frozenset({"function", "function_call"})
"""Keys of function objects (a tool call's, a legacy function_call): the name is structure, the
arguments JSON text."""


def text_slots(endpoint: Endpoint, body: dict[str, Any], tool_descriptions: bool) -> list[Slot]:
    """Every text of a request body (chat or embeddings: one walk serves both)."""
    slots: list[Slot] = []
    for key, value in body.items():
        if key in SCHEMAS:
            if tool_descriptions:
                slots.extend(_descriptions(value))
        else:
            _texts(body, key, value, slots)
    return slots


_SKIPPED = STRUCTURAL | NOT_TEXT
_SCALARS = frozenset({type(None), bool, int, float})  # JSON's values that hold no text


def _texts(container: dict[str, Any] | list[Any], key: Any, value: Any, into: list[Slot]) -> None:
    """The texts at `container[key]`, at any depth, less what is structure or not text, into
    `into` (a walk that appends, not nested generators: it runs on every request, over a
    history that grows each turn of a session: a dict's or a list's plain strings, numbers
    and nulls are taken in its loop, without a call each)."""
    if isinstance(key, str):
        if key in _SKIPPED:
            return
        if key in FUNCTIONS and isinstance(value, dict):
            if isinstance(value.get("arguments"), str):
                into.append((value, "arguments", True))
            return
    if isinstance(value, str):
        if value and not _is_data_url(value):
            into.append((container, key, False))
    elif isinstance(value, dict):
        for inner_key, inner in value.items():
            kind = inner.__class__
            if kind is str and inner_key.__class__ is str:
                if inner and inner_key not in _SKIPPED and not _is_data_url(inner):
                    into.append((value, inner_key, False))
            elif kind not in _SCALARS:
                _texts(value, inner_key, inner, into)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            kind = inner.__class__
            if kind is str:
                if inner and not _is_data_url(inner):
                    into.append((value, index, False))
            elif kind not in _SCALARS:
                _texts(value, index, inner, into)


def _is_data_url(value: str) -> bool:
    return value.startswith("data:") and ";base64," in value[:256]


def _descriptions(node: Any) -> Iterator[Slot]:
    if isinstance(node, list):
        for item in node:
            yield from _descriptions(item)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key == "description" and isinstance(value, str):
            yield node, key, False
        elif isinstance(value, dict | list):
            yield from _descriptions(value)


def redact_request(
    endpoint: Endpoint, body: dict[str, Any], state: RedactionState, tool_descriptions: bool
) -> None:
    """Apply the request mode to every text of `body`, in place; raise SensitiveDataBlocked for
    `block`. Kinds found are counted in `state.found` (kinds only, never values)."""
    mode = state.rules.request
    detector = state.detector
    slots = text_slots(endpoint, body, tool_descriptions)
    # The short texts (a system prompt, tool results, the new turn), which are not remembered,
    # are scanned in one go; only when that finds something is each scanned on its own.
    short = [text for container, key, _ in slots if len(text := container[key]) < MIN_CHARS]
    scanned = slots
    if len(short) > 1 and detector.none_in(short):
        scanned = [slot for slot in slots if len(slot[0][slot[1]]) >= MIN_CHARS]
    if mode == "block":
        for container, key, _ in scanned:
            state.count(detector.find_remembered(container[key]))
        if state.found:
            raise SensitiveDataBlocked(sorted(state.found))
        return
    replacement: Callable[[Found, str], str]
    if mode == "tokenize":
        vault = Vault(p for container, key, _ in slots for p in placeholders_in(container[key]))
        state.vault = vault
    for container, key, in_json in scanned:
        text = container[key]
        found = detector.find_remembered(text)
        if not found:
            continue
        state.count(found)
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
