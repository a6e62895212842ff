"""The one function for everything persisted: logs, span attributes, the decision log.

`scrub_record` returns a record with every string in it (at any depth) scrubbed:
each entity of every built-in kind becomes its marker (`[EMAIL]`), whatever any
tenant's mode. A gateway's own scrubber (`settings.scrubber_for(config)`) also knows the
tenants' custom kinds and the credentials written in the config; the log formatter uses
that one. A record with nothing to scrub comes back as the very same object.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, TypeVar

from gateway.redaction.detector import Catalog, Detector, Found
from gateway.redaction.entities import BUILTIN
from gateway.redaction.window import redact_whole

T = TypeVar("T")

SECRET_MARKER = "[SECRET]"  # noqa: S105 (a marker, not a password)
_SEPARATOR = "\x00"  # no pattern matches it, so no entity spans two joined strings


def marker(found: Found, value: str) -> str:
    return f"[{found.kind}]"


class Scrubber:
    def __init__(self, detector: Detector, secrets: Iterable[str] = ()) -> None:
        self._detector = detector
        # Longest first, so that a secret containing another is replaced whole.
        self._secrets = tuple(sorted(set(secrets), key=len, reverse=True))

    def text(self, value: str) -> str:
        for secret in self._secrets:
            if secret in value:
                value = value.replace(secret, SECRET_MARKER)
        return redact_whole(self._detector, value, marker)

    def record(self, value: T) -> T:
        strings: list[str] = []
        _collect(value, strings)
        if not strings:
            return value
        # One scan for the whole record; only a record with something to hide is rebuilt.
        joined = _SEPARATOR.join(strings)
        if not self._detector.find(joined) and not any(s in joined for s in self._secrets):
            return value
        rebuilt: T = self._rebuilt(value)
        return rebuilt

    def _rebuilt(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: self._rebuilt(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self._rebuilt(item) for item in value)
        return value


def _collect(value: Any, into: list[str]) -> None:
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, into)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, into)


@functools.cache
def default_scrubber() -> Scrubber:
    """Every built-in kind; compiled on first use (about 0.1 s), then shared."""
    return Scrubber(Catalog(BUILTIN).detector())


def scrub_text(value: str) -> str:
    """`value` with every built-in entity replaced by its marker."""
    return default_scrubber().text(value)


def scrub_record(value: T) -> T:
    """`value` (dicts, lists, tuples, strings, any depth) with every string scrubbed."""
    return default_scrubber().record(value)
