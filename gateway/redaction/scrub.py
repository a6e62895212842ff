"""The one function for everything persisted: logs, span attributes, the decision log.

`scrub_record` returns a record with every string in it (at any depth) scrubbed:
each entity of every built-in kind becomes its marker (`[EMAIL]`), whatever any
tenant's mode. A gateway's own scrubber (`settings.scrubber_for(config)`) also knows the
tenants' custom kinds and the credentials written in the config; the log formatter uses
that one. A record with nothing to scrub comes back as the very same object.

A `Verbatim` string is an id the gateway rendered as hex (one it minted or derived, or a
traceparent's trace id once the scrubber found nothing in it) and passes as it is: a scan
could read a run of its digits as a card number and log an id that matches nothing. Never
make a client's text Verbatim: hex a client chose can spell a card number.

A scrubber remembers the short strings it found clean (a bounded table), since a log line
repeats most of its values (tenant, model, upstream, route, status): a record whose strings
were all seen before returns without a scan, and only unseen strings are scanned.

A `Settled` dict is one whose content is fixed (a cached policy decision, the policy input
of a cached shape): once a record holding it was found clean, the scrubber passes it without
walking it again, but for the entries it names as variable (the decision log's record repeats
such dicts of some dozens of strings on every request).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, TypeVar

from gateway.redaction.detector import Catalog, Detector, Found
from gateway.redaction.entities import BUILTIN
from gateway.redaction.joined import SEPARATOR
from gateway.redaction.marks import Settled, Verbatim
from gateway.redaction.window import redact_whole

T = TypeVar("T")

SECRET_MARKER = "[SECRET]"  # noqa: S105 (a marker, not a password)

CLEAN_MAX_CHARS = 200
"""Only strings up to this length are remembered clean (ids, names, statuses, not messages)."""
CLEAN_MAX_STRINGS = 4096
"""The table of clean strings is emptied when it holds this many."""
CLEAN_MAX_SETTLED = 1024
"""The table of Settled dicts found clean is emptied when it holds this many."""


def marker(found: Found, value: str) -> str:
    return f"[{found.kind}]"


class Scrubber:
    def __init__(self, detector: Detector, secrets: Iterable[str] = ()) -> None:
        self._detector = detector
        # Longest first, so that a secret containing another is replaced whole.
        self._secrets = tuple(sorted(set(secrets), key=len, reverse=True))
        # Strings known clean for this detector and these secrets: a property of the string
        # alone, so it holds for every later record. Only what is clean is kept.
        self._clean: dict[str, None] = {}
        # Settled dicts found clean: by key, or by id (then holding the dict, so that its id
        # is not reused while it is here).
        self._settled: dict[object, Settled | None] = {}

    def text(self, value: str) -> str:
        if value in self._clean or type(value) is Verbatim:
            return value
        scrubbed = value
        for secret in self._secrets:
            if secret in scrubbed:
                scrubbed = scrubbed.replace(secret, SECRET_MARKER)
        scrubbed = redact_whole(self._detector, scrubbed, marker)
        if scrubbed is value:
            self._remember((value,))
        return scrubbed

    def record(self, value: T) -> T:
        unseen: list[str] = []
        walked: list[Settled] = []  # Settled dicts not known clean yet, walked whole
        _collect(value, (self._settled, walked), self._clean, unseen)
        if not unseen:
            if walked:
                self._remember_settled(walked)
            return value
        # One scan for all the unseen strings; only a record with something to hide is rebuilt.
        dirty = not self._detector.none_in(unseen)
        if not dirty and self._secrets:
            joined = SEPARATOR.join(unseen)  # no secret holds the separator
            dirty = any(secret in joined for secret in self._secrets)
        if dirty:
            rebuilt: T = self._rebuilt(value)
            return rebuilt
        self._remember(unseen)
        if walked:
            self._remember_settled(walked)
        return value

    def _remember_settled(self, walked: list[Settled]) -> None:
        settled = self._settled
        if len(settled) >= CLEAN_MAX_SETTLED:
            settled.clear()
        for item in walked:
            if item.key is not None:
                settled[item.key] = None
            else:
                settled[id(item)] = item

    def _remember(self, strings: Iterable[str]) -> None:
        clean = self._clean
        if len(clean) >= CLEAN_MAX_STRINGS:
            clean.clear()
        for string in strings:
            if len(string) <= CLEAN_MAX_CHARS:
                clean[string] = None

    def _rebuilt(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: self._rebuilt(item) for key, item in value.items()}
        if isinstance(value, _SEQUENCES):
            return type(value)(self._rebuilt(item) for item in value)
        return value


# What a walk of a record knows besides the clean strings: the Settled dicts found clean, and
# where it lists those it had to walk whole.
_Seen = tuple[dict[object, "Settled | None"], list["Settled"]]


def _collect(value: Any, seen: _Seen, known: dict[str, None], into: list[str]) -> None:
    """The strings in `value` (at any depth) that are not known clean, into `into`."""
    if isinstance(value, str):
        if value not in known and type(value) is not Verbatim:
            into.append(value)
    elif type(value) is Settled:
        _collect_settled(value, seen, known, into)
    elif isinstance(value, dict):
        _collect_items(value.values(), seen, known, into)
    elif isinstance(value, _SEQUENCES):
        _collect_items(value, seen, known, into)


def _collect_items(items: Iterable[Any], seen: _Seen, known: dict[str, None], into: list[str]) -> None:
    # The exact types a record holds are tried first, and an empty container costs no call:
    # the decision log's record nests a dozen dicts and lists, several of them empty.
    for item in items:
        kind = type(item)
        if kind is str:
            if item not in known:
                into.append(item)
        elif kind in _SCALARS:
            continue
        elif kind is dict:
            if item:
                _collect_items(item.values(), seen, known, into)
        elif kind is list or kind is tuple:
            if item:
                _collect_items(item, seen, known, into)
        elif kind is Settled:
            _collect_settled(item, seen, known, into)
        elif isinstance(item, str):
            if item not in known and kind is not Verbatim:
                into.append(item)
        elif isinstance(item, dict):
            _collect_items(item.values(), seen, known, into)
        elif isinstance(item, _SEQUENCES):
            _collect_items(item, seen, known, into)


def _collect_settled(item: Settled, seen: _Seen, known: dict[str, None], into: list[str]) -> None:
    settled, walked = seen
    key = item.key
    if key in settled if key is not None else settled.get(id(item)) is item:
        for name in item.variable:
            _collect_items((item.get(name),), seen, known, into)
        return
    walked.append(item)
    _collect_items(item.values(), seen, known, into)


# Tuples of types, not `X | Y` unions (slower in isinstance); the scalars a record holds most.
_SEQUENCES = (list, tuple)
_SCALARS = frozenset({int, float, bool, type(None)})


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
