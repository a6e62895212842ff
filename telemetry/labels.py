"""Label values that come from requests, each folded into a small, fixed set.

No request id, session id, key or raw header value ever becomes a label: a label value is
either configured (tenant, model alias, upstream), a gateway code (error.type), or one of
the bounded forms below.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any

from gateway.exchange import Exchange
from gateway.telemetry_config import WORKFLOW_PATTERN, LabelsConfig

DEFAULT_WORKFLOW = "default"  # no x-workflow header and no key label
OTHER_WORKFLOW = "other"  # not allowed, malformed, or past the cap
NO_FAMILY = "none"
PROMPT_FAMILY_HEADER = "x-prompt-family"

_WORKFLOW = re.compile(WORKFLOW_PATTERN)
# Conversation turn (assistant messages so far, plus one), in buckets of doubling width.
_TURN_BUCKETS = ((1, "1"), (2, "2"), (4, "3-4"), (8, "5-8"), (16, "9-16"), (32, "17-32"))
_LAST_TURN_BUCKET = "33+"


class WorkflowLabels:
    """The workflow of a request: its `x-workflow` header, else its key's default workflow,
    else its key's label; or, when `routing.workflows` is configured, the request's workflow
    as the label stage set it.

    With an allowlist, only listed values; without one, any value matching WORKFLOW_PATTERN,
    first come, up to `max_workflows` distinct values in this worker. A new value is also
    passed through the scrubber once: one that looks like a secret is not taken.
    """

    def __init__(
        self, config: LabelsConfig, scrub: Callable[[str], str], from_exchange: bool = False
    ) -> None:
        self._from_exchange = from_exchange
        self._allowed = frozenset(config.workflows)
        self._max = config.max_workflows
        self._scrub = scrub
        self._accepted: set[str] = set()

    def of(self, exchange: Exchange) -> str:
        if self._from_exchange:
            return exchange.workflow
        raw = exchange.headers.get("x-workflow")
        if raw is None:
            principal = exchange.principal
            raw = (principal.default_workflow or principal.key_label) if principal is not None else ""
            if not raw:
                return DEFAULT_WORKFLOW
        if raw in self._accepted:
            return raw
        return self._admit(raw)

    def _admit(self, raw: str) -> str:
        if self._allowed:
            if raw not in self._allowed:
                return OTHER_WORKFLOW
        elif len(self._accepted) >= self._max or not _WORKFLOW.fullmatch(raw) or self._scrub(raw) != raw:
            return OTHER_WORKFLOW
        self._accepted.add(raw)
        return raw


class PromptFamilyNames:
    """The configured name of a request's prompt family (`routing.prompt_families`), if any.

    An `x-prompt-family` header naming a configured family is taken as it is; otherwise the
    SHA-256 of the first system (or developer) message's text is compared with the
    configured digests (their leading hex digits). Any other request has no name, and its
    family stays a hashed bucket (`prompt_family`). Nothing is hashed when none is configured.
    """

    def __init__(self, families: Mapping[str, str]) -> None:
        self._names = frozenset(families)
        by_length: dict[int, dict[str, str]] = {}
        for name, digest in families.items():
            by_length.setdefault(len(digest), {})[digest] = name
        self._by_length = sorted(by_length.items())

    def name(self, exchange: Exchange) -> str | None:
        if not self._names:
            return None
        header = exchange.headers.get(PROMPT_FAMILY_HEADER)
        if header is not None and header.strip() in self._names:
            return header.strip()
        text = _system_text(exchange.body)
        if text is None:
            return None
        digest = hashlib.sha256(text.encode()).hexdigest()
        for length, names in self._by_length:
            found = names.get(digest[:length])
            if found is not None:
                return found
        return None


def _system_text(body: dict[str, Any]) -> str | None:
    messages = body.get("messages")
    for message in messages[:4] if isinstance(messages, list) else ():
        if isinstance(message, dict) and message.get("role") in ("system", "developer"):
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(
                    p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
                )
            return None
    return None


def prompt_family(session_key: str | None, buckets: int) -> str:
    """The bucket of the request's affinity key (its prompt family, or the session the client
    named): a hex hash, so its leading digits spread evenly over `buckets` values."""
    if not session_key:
        return NO_FAMILY
    try:
        index = int(session_key[:8], 16) % buckets
    except ValueError:
        return NO_FAMILY
    return f"pf{index:02d}"


def turn_bucket(body: dict[str, Any]) -> str | None:
    """The conversation turn of a chat request, bucketed; None when it has no messages."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    turn = 1 + sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    for upper, label in _TURN_BUCKETS:
        if turn <= upper:
            return label
    return _LAST_TURN_BUCKET
