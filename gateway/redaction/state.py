"""Per-request redaction state (on the Exchange) and the counters an operator watches."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway.policy.decision import RedactMode, RedactRules
from gateway.redaction.detector import Detector, Found
from gateway.redaction.tokens import Vault
from gateway.redaction.window import SlidingWindow


@dataclass(slots=True)
class RedactionCounters:
    """Counts only, never values. Metrics export reads these (telemetry work)."""

    requests: int = 0  # requests whose text was scanned
    blocked: int = 0  # requests refused, and responses cut, for sensitive data
    failures: int = 0  # detection failures, whatever happened next
    failed_open: int = 0  # of which passed through unredacted because the tenant is fail-open
    entities: Counter[str] = field(default_factory=Counter)  # kind -> occurrences found

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "blocked": self.blocked,
            "failures": self.failures,
            "failed_open": self.failed_open,
            "entities": dict(self.entities),
        }


@dataclass(slots=True)
class StreamState:
    """The response guard's windows for one streamed answer."""

    windows: dict[tuple[int, int | str], SlidingWindow] = field(default_factory=dict)  # (choice, text | tool)
    stopped: set[int] = field(default_factory=set)  # choices cut by `block`
    envelope: dict[str, Any] = field(default_factory=dict)  # id, created, model: for a closing chunk
    deferred: tuple[int, int | str] | None = None  # the window holding text not scanned yet (RedactionGuard)


@dataclass(slots=True)
class RedactionState:
    """What the redact stage decided for one request, for the response guard to carry on."""

    rules: RedactRules
    detector: Detector
    fail_open: bool
    vault: Vault | None = None  # set when the request was tokenised
    found: dict[str, int] = field(default_factory=dict)  # kinds found in the request, and how often
    stream: StreamState | None = None
    disabled: bool = False  # a fail-open tenant's detection failed: leave the rest alone

    def count(self, found: Iterable[Found]) -> None:
        """Counts the kinds of `found` in `self.found` (kinds only, never values)."""
        counts = self.found
        for item in found:
            counts[item.kind] = counts.get(item.kind, 0) + 1

    @property
    def response(self) -> RedactMode:
        return self.rules.response

    @property
    def restores(self) -> bool:
        """Placeholders go back into the answer unless the response is itself masked or blocked."""
        return bool(self.vault) and self.rules.response in ("off", "tokenize")

    @property
    def guards_response(self) -> bool:
        return not self.disabled and (self.restores or self.rules.response in ("mask", "block", "tokenize"))
