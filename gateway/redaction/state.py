"""Per-request redaction state (on the Exchange) and the counters an operator watches."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway.chunk_shapes import TEXT_FIELDS
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


@dataclass(slots=True, init=False)
class StreamState:
    """The response guard's windows for one streamed answer."""

    windows: dict[tuple[int, int | str], SlidingWindow]  # (choice, text | tool)
    stopped: set[int]  # choices cut by `block`
    envelope: dict[str, Any]  # id, created, model: for a closing chunk
    deferred: tuple[int, int | str] | None  # the window holding text not scanned yet (RedactionGuard)

    # Written out: under mypyc (setup.py) a dataclass's generated __init__ runs interpreted.
    def __init__(self, envelope: dict[str, Any] | None = None) -> None:
        self.windows = {}
        self.stopped = set()
        self.envelope = {} if envelope is None else envelope
        self.deferred = None

    def scans_first(self, data: dict[str, Any], key: tuple[int, int | str]) -> bool:
        """Whether guarding `data` scans the window of `key` before any other of its choice
        (`RedactionGuard._redact_delta`'s order): the first text its choice's delta carries
        is that window's, or, with no text, the first tool call's arguments are; or it carries
        neither and finishes the choice, whose windows are flushed in order, that one first."""
        index, part = key
        choices = data.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if isinstance(choice, dict) and choice.get("index", 0) == index:
                delta = choice.get("delta")
                if not isinstance(delta, dict):
                    return False
                for name in TEXT_FIELDS:
                    text = delta.get(name)
                    if isinstance(text, str) and text:
                        return name == part
                calls = delta.get("tool_calls")
                for position, call in enumerate(calls if isinstance(calls, list) else ()):
                    function = call.get("function") if isinstance(call, dict) else None
                    arguments = function.get("arguments") if isinstance(function, dict) else None
                    if isinstance(arguments, str) and arguments:
                        return bool(call.get("index", position) == part)
                if choice.get("finish_reason") is None:
                    return False
                return next((k for k in self.windows if k[0] == index), None) == key
        return False


@dataclass(slots=True, init=False)
class RedactionState:
    """What the redact stage decided for one request, for the response guard to carry on."""

    rules: RedactRules
    detector: Detector
    fail_open: bool
    vault: Vault | None  # set when the request was tokenised
    found: dict[str, int]  # kinds found in the request, and how often
    stream: StreamState | None
    disabled: bool  # a fail-open tenant's detection failed: leave the rest alone

    def __init__(self, rules: RedactRules, detector: Detector, fail_open: bool) -> None:
        self.rules = rules
        self.detector = detector
        self.fail_open = fail_open
        self.vault = None
        self.found = {}
        self.stream = None
        self.disabled = False

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
