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
import re
from collections.abc import Iterable
from typing import Any, TypeVar

from gateway.redaction.detector import Catalog, Detector, Found
from gateway.redaction.entities import BUILTIN
from gateway.redaction.window import redact_whole

T = TypeVar("T")

SECRET_MARKER = "[SECRET]"  # noqa: S105 (a marker, not a password)
_SEPARATOR = "\x00"  # no pattern matches it, so no entity spans two joined strings

CLEAN_MAX_CHARS = 200
"""Only strings up to this length are remembered clean (ids, names, statuses, not messages)."""
CLEAN_MAX_STRINGS = 4096
"""The table of clean strings is emptied when it holds this many."""
CLEAN_MAX_SETTLED = 1024
"""The table of Settled dicts found clean is emptied when it holds this many."""


class Verbatim(str):
    """An id the gateway rendered as hex digits, and nothing else: never scrubbed."""

    __slots__ = ()


class Settled(dict[str, Any]):
    """A dict whose content is fixed, but for the entries named in `variable`.

    `key`, when given, identifies that content exactly (bytes such as its canonical JSON,
    Verbatim strings in the same places), so another dict with the same key is known clean
    once one was; without a key the dict itself is remembered (it must then never change).
    The scrubber walks a Settled dict whole the first time, then only its variable entries.
    """

    __slots__ = ("key", "variable")

    def __init__(
        self, content: dict[str, Any], key: bytes | None = None, variable: tuple[str, ...] = ()
    ) -> None:
        super().__init__(content)
        self.key = key
        self.variable = variable


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
        # Whether one scan of several strings joined says what scanning each would.
        self._joinable = all(
            separator_blind(pattern)
            for kind in detector.catalog.kinds
            if kind.name in detector.names
            for pattern in kind.patterns
        )

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
        if self._joinable:
            # One scan for all the unseen strings; only a record with something to hide is rebuilt.
            joined = _SEPARATOR.join(unseen)
            dirty = bool(self._detector.find(joined)) or any(s in joined for s in self._secrets)
        else:
            dirty = any(self._detector.find(s) or any(x in s for x in self._secrets) for s in unseen)
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


_parser: Any = getattr(re, "_parser", None)  # the stdlib's own parser (private, stable since 3.11)
_BOUNDARIES = frozenset(
    {"AT_BOUNDARY", "AT_NON_BOUNDARY", "AT_UNI_BOUNDARY", "AT_UNI_NON_BOUNDARY"}
    | {"AT_LOC_BOUNDARY", "AT_LOC_NON_BOUNDARY"}
)
_NUL_FREE_CATEGORIES = frozenset(
    {"CATEGORY_DIGIT", "CATEGORY_SPACE", "CATEGORY_WORD", "CATEGORY_LINEBREAK"}
    | {"CATEGORY_UNI_DIGIT", "CATEGORY_UNI_SPACE", "CATEGORY_UNI_WORD", "CATEGORY_UNI_LINEBREAK"}
    | {"CATEGORY_LOC_WORD"}
)


def separator_blind(pattern: str) -> bool:
    """Whether `pattern` finds a match in strings joined by the separator whenever it finds one
    in any of them alone: no anchor but word boundaries, and nothing whose outcome could change
    on meeting the separator where a string would end (a look-around, an atomic group, a
    possessive repeat or a back-reference that could match it). Unknown syntax: no."""
    if _parser is None:
        return False
    try:
        return _blind(_parser.parse(pattern))
    except Exception:  # any trouble parsing it means: do not rely on joining
        return False


def _blind(nodes: Any) -> bool:
    for op, av in nodes:
        name = str(op)
        if name == "AT":
            if str(av) not in _BOUNDARIES:
                return False
        elif name in ("ASSERT", "ASSERT_NOT"):
            if not (_blind(av[1]) and _nul_free(av[1])):
                return False
        elif name == "ATOMIC_GROUP":
            if not (_blind(av) and _nul_free(av)):
                return False
        elif name == "POSSESSIVE_REPEAT":
            if not (_blind(av[2]) and _nul_free(av[2])):
                return False
        elif name == "SUBPATTERN":
            if not _blind(av[3]):
                return False
        elif name == "BRANCH":
            if not all(_blind(branch) for branch in av[1]):
                return False
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            if not _blind(av[2]):
                return False
        elif name == "GROUPREF_EXISTS":
            if not (_blind(av[1]) and (av[2] is None or _blind(av[2]))):
                return False
        elif name not in ("LITERAL", "NOT_LITERAL", "ANY", "IN", "CATEGORY", "GROUPREF"):
            return False
    return True


def _nul_free(nodes: Any) -> bool:
    """Whether nothing in `nodes` can consume the separator."""
    for op, av in nodes:
        name = str(op)
        if name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue  # consumes nothing (and is checked on its own by _blind)
        if name == "LITERAL":
            if av == 0:
                return False
        elif name == "IN":
            if not _class_nul_free(av):
                return False
        elif name == "SUBPATTERN":
            if not _nul_free(av[3]):
                return False
        elif name == "BRANCH":
            if not all(_nul_free(branch) for branch in av[1]):
                return False
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            if not _nul_free(av[2]):
                return False
        elif name == "ATOMIC_GROUP":
            if not _nul_free(av):
                return False
        elif name == "CATEGORY":
            if str(av) not in _NUL_FREE_CATEGORIES:
                return False
        else:  # NOT_LITERAL, ANY, a back-reference, a conditional: may consume it
            return False
    return True


def _class_nul_free(items: Any) -> bool:
    negated = False
    holds = False
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            negated = True
        elif name == "LITERAL":
            holds = holds or av == 0
        elif name == "RANGE":
            holds = holds or av[0] == 0
        elif name == "CATEGORY":
            holds = holds or str(av) not in _NUL_FREE_CATEGORIES
        else:
            return False
    return holds == negated


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
