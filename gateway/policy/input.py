"""The policy input document: what a decision may depend on (docs/policies.md).

Only low-cardinality facts go in (tenant, key, endpoint, model, tool names, flags, coarse
bands), never message text and never exact quantities, so that two requests of the same
shape get the same document and the decision can be cached. The gateway enforces the
quantities itself with the limits the decision returns. The request id is added for the
engine and the decision log but is not part of the cache key.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import InvalidRequest
from gateway.exchange import Endpoint, Exchange
from gateway.policy.defer import CAPACITY_OK
from gateway.redaction.marks import Settled
from gateway.sessions.bands import NO_SESSION

DATA_CLASS_HEADER = "x-data-class"
_VARIABLE = ("request_id",)  # the document's one entry outside its cache key
BUDGET_OK = "ok"  # the band without metering; with it also "soft_exceeded" and "exceeded"

_DATA_CLASS = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})
_CHARS_PER_TOKEN = 4  # a coarse estimate; only its band is used
_MESSAGE_BANDS = ((1, "1"), (2, "2-3"), (4, "4-7"), (8, "8-15"), (16, "16-31"), (32, "32+"))
_TOKEN_BANDS = (
    (0, "<1k"),
    (1_000, "1k-4k"),
    (4_000, "4k-16k"),
    (16_000, "16k-64k"),
    (64_000, "64k-256k"),
    (256_000, "256k+"),
)


@dataclass(slots=True, init=False)
class PolicyInput:
    document: dict[str, Any]  # what the engine sees, request id included
    cache_key: bytes  # canonical JSON of the document without the request id

    def __init__(self, document: dict[str, Any], cache_key: bytes) -> None:
        self.document = document
        self.cache_key = cache_key


def build_input(
    exchange: Exchange, upstreams: Sequence[str], budget: str = BUDGET_OK, capacity: str = CAPACITY_OK
) -> PolicyInput:
    """The input document for a request that admit has authenticated and validated.

    `upstreams` are the names of the upstreams that serve the requested model alias, in
    order of preference; `budget` is the caller's budget band; `capacity` whether an
    upstream is throttling now ("ok" or "throttled", gateway/policy/defer.py). Raises InvalidRequest for a
    malformed x-data-class header.
    """
    principal = exchange.principal
    if principal is None:
        raise RuntimeError("decide runs after admit: the request has no principal")
    body = exchange.body
    chat = exchange.endpoint is Endpoint.CHAT
    messages = body.get("messages") if chat else None
    messages = messages if isinstance(messages, list) else []
    choice_mode, choice_name = _tool_choice(body.get("tool_choice")) if chat else (None, None)
    document: dict[str, Any] = {
        "tenant": principal.tenant.name,
        "key": {"id": principal.key_id, "label": principal.key_label},
        "endpoint": exchange.endpoint.value,
        "api": exchange.api,  # the client API the request came through (gateway/doors)
        "model": exchange.model_alias,
        "upstreams": list(dict.fromkeys(upstreams)),
        "tools": _tool_names(body.get("tools")) if chat else [],
        "tool_choice": choice_mode,
        "tool_choice_name": choice_name,
        "stream": exchange.stream,
        "response_format": _response_format(body.get("response_format")) if chat else None,
        "has_images": chat and _has_images(messages),
        "message_roles": sorted({m["role"] for m in messages if isinstance(m, dict)}),
        "messages": _band(len(messages), _MESSAGE_BANDS) if chat else "0",
        "prompt_tokens": _band(_estimated_tokens(messages if chat else body.get("input")), _TOKEN_BANDS),
        "session": exchange.session_key is not None,
        "session_state": exchange.session.bands if exchange.session else NO_SESSION,
        "budget": budget,
        "data_class": _data_class(exchange.headers.get(DATA_CLASS_HEADER)),
        "workflow": exchange.workflow,
        "priority": exchange.priority,
        "async": exchange.job_id is not None,  # a job's submission (gateway/jobs/), not a synchronous call
        "capacity": capacity,
    }
    key = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    # Its content is what the key says, but for the request id: the decision log's scrubber
    # walks it once per shape rather than on every request.
    settled = Settled(document, key, _VARIABLE)
    settled["request_id"] = exchange.request_id
    return PolicyInput(settled, key)


def _tool_names(tools: Any) -> list[str]:
    """Offered tool names as the tool guard reads them: the name under the tool's type key
    ("function": {"name": ...}), else the type itself."""
    names: set[str] = set()
    for tool in tools if isinstance(tools, list) else ():
        kind = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(kind, str):
            spec = tool.get(kind)
            name = spec.get("name") if isinstance(spec, dict) else kind
            names.add(name if isinstance(name, str) else "")
    return sorted(names)


def _tool_choice(choice: Any) -> tuple[str | None, str | None]:
    if choice is None:
        return None, None
    if isinstance(choice, str):
        return choice, None
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str):
            return "named", name
        kind = choice.get("type")
        return (kind if isinstance(kind, str) else "unknown"), None
    return "unknown", None


def _response_format(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else None
    return kind if isinstance(kind, str) else None


def _has_images(messages: list[Any]) -> bool:
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") in _IMAGE_PARTS:
                    return True
    return False


def _estimated_tokens(source: Any) -> int:
    return _text_length(source) // _CHARS_PER_TOKEN


def _text_length(value: Any) -> int:
    """Characters of text in messages or an embeddings input: contents and text parts.
    Token ids (an embeddings input may be token arrays) count as one token each.

    Run on every request over its whole history, which grows each turn of an agent's
    session: a list's plain strings and its messages' string contents are counted in the
    loop, without a call each (half the time on a 90-message history)."""
    if isinstance(value, list):
        total = 0
        for item in value:
            if item.__class__ is dict and "content" in item:
                content = item["content"]
                total += len(content) if content.__class__ is str else _text_length(content)
            elif item.__class__ is str:
                total += len(item)
            else:
                total += _text_length(item)
        return total
    if isinstance(value, str):
        return len(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return _CHARS_PER_TOKEN
    if isinstance(value, dict):
        if "content" in value:
            return _text_length(value["content"])
        text = value.get("text")
        return len(text) if isinstance(text, str) else 0
    return 0


def _band(value: int, bands: tuple[tuple[int, str], ...]) -> str:
    label = "0"
    for lower, name in bands:
        if value < lower:
            break
        label = name
    return label


def _data_class(value: str | None) -> str | None:
    if value is None:
        return None
    label = value.strip().lower()
    if not _DATA_CLASS.match(label):
        raise InvalidRequest(
            f"Invalid {DATA_CLASS_HEADER} header: expected a label of letters, digits, '.', '_' or '-' "
            "(at most 64 characters).",
            code="invalid_header",
        )
    return label


WEBHOOKS_ENDPOINT = "webhooks"


def webhook_input(tenant: str, key: tuple[str, str | None] | None, request_id: str) -> PolicyInput:
    """The input document for a tenant's webhook destinations: registering a URL (`key`: the
    caller's id and label) or delivering an event to it (`key` None: no caller). No model is
    asked for; the decision's `destinations.webhook_url` is what the gateway reads."""
    document: dict[str, Any] = {
        "tenant": tenant,
        "key": {"id": key[0], "label": key[1]} if key is not None else None,
        "endpoint": WEBHOOKS_ENDPOINT,
        "api": WEBHOOKS_ENDPOINT,
        "model": None,
        "upstreams": [],
        "tools": [],
        "stream": False,
        "budget": BUDGET_OK,
        "data_class": None,
        "async": True,
        "capacity": CAPACITY_OK,
    }
    key_bytes = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    document["request_id"] = request_id
    return PolicyInput(document, key_bytes)
