"""Label values that come from requests, each folded into a small, fixed set.

No request id, session id, key or raw header value ever becomes a label: a label value is
either configured (tenant, model alias, upstream), a gateway code (error.type), or one of
the bounded forms below.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from gateway.exchange import Exchange
from gateway.telemetry_config import WORKFLOW_PATTERN, LabelsConfig

DEFAULT_WORKFLOW = "default"  # no x-workflow header and no key label
OTHER_WORKFLOW = "other"  # not allowed, malformed, or past the cap
NO_FAMILY = "none"

_WORKFLOW = re.compile(WORKFLOW_PATTERN)
# Conversation turn (assistant messages so far, plus one), in buckets of doubling width.
_TURN_BUCKETS = ((1, "1"), (2, "2"), (4, "3-4"), (8, "5-8"), (16, "9-16"), (32, "17-32"))
_LAST_TURN_BUCKET = "33+"


class WorkflowLabels:
    """The workflow of a request: its `x-workflow` header, else its key's default workflow,
    else its key's label.

    With an allowlist, only listed values; without one, any value matching WORKFLOW_PATTERN,
    first come, up to `max_workflows` distinct values in this worker. A new value is also
    passed through the scrubber once: one that looks like a secret is not taken.
    """

    def __init__(self, config: LabelsConfig, scrub: Callable[[str], str]) -> None:
        self._allowed = frozenset(config.workflows)
        self._max = config.max_workflows
        self._scrub = scrub
        self._accepted: set[str] = set()

    def of(self, exchange: Exchange) -> str:
        raw = exchange.headers.get("x-workflow")
        if raw is None:
            principal = exchange.principal
            raw = (principal.workflow or principal.key_label) if principal is not None else ""
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
