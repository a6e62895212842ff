"""Searching a stream's text, which may go on: which patterns can begin in it (`StreamPlan`),
the patterns' matches up to the first of each that is, or may be, still in progress, and
where the earliest such one starts (the window's hold: `scan_patterns`).

Compiled with the request path (a paced stream scans once per chunk); the patterns are the
plain `detector` module's, seen here through `ExactPattern`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from gateway.redaction.entities import LOOKAHEAD
from gateway.redaction.prefilter import Prefilter

_CHOSEN = 4096
UNBOUNDED = 1 << 62
_TAILS_FROM = 4  # patterns to search: below this, searching each costs less than sparing some


class ExactPattern(Protocol):
    """One pattern of a catalog (`detector._Exact`), as a stream's scan reads it."""

    @property
    def kind(self) -> str: ...
    @property
    def pattern(self) -> Any: ...  # regex.Pattern[str]
    @property
    def width(self) -> int: ...
    @property
    def shortest(self) -> int: ...
    @property
    def starts(self) -> frozenset[str] | None: ...
    @property
    def prefiltered(self) -> int: ...
    @property
    def tail_chars(self) -> str | None: ...
    @property
    def first_char(self) -> Any: ...  # re.Pattern[str] | None

    def accept(self, match: Any) -> Any: ...  # its Found, or None


class StreamPlan:
    """The patterns of some kinds, by the ASCII characters their matches can begin with: the
    patterns a scan of ASCII text must search are those of the characters it holds, found
    with a lookup per distinct character rather than a test per pattern."""

    __slots__ = ("_always", "_by_char", "_chosen", "every")

    def __init__(self, patterns: Sequence[ExactPattern], names: frozenset[str]) -> None:
        self.every = tuple(exact for exact in patterns if exact.kind in names)
        by_char: dict[str, list[int]] = {}
        always: list[int] = []
        for index, exact in enumerate(self.every):
            if exact.starts is None:
                always.append(index)
            else:
                for char in exact.starts:
                    by_char.setdefault(char, []).append(index)
        self._by_char = {char: frozenset(indexes) for char, indexes in by_char.items()}
        self._always = frozenset(always)
        # Per set of characters seen: a stream's chunks bring the same few sets again and again.
        self._chosen: dict[frozenset[str], list[ExactPattern]] = {}

    def for_chars(self, present: frozenset[str]) -> list[ExactPattern]:
        """The patterns, in catalog order, that may begin with one of `present`."""
        known = self._chosen.get(present)
        if known is not None:
            return known
        if len(self._chosen) >= _CHOSEN:
            self._chosen.clear()
        chosen = set(self._always)
        by_char = self._by_char
        for char in present:
            indexes = by_char.get(char)
            if indexes is not None:
                chosen |= indexes
        every = self.every
        patterns = self._chosen[present] = [every[index] for index in sorted(chosen)]
        return patterns


def scan_patterns(
    plan: StreamPlan, prefilter: Prefilter, text: str, pos: int, final: bool
) -> tuple[list[Any], list[Any], int]:
    """The plan's patterns searched in `text` from `pos` on: (every complete match, accepted or
    not; the accepted ones, as the patterns' `accept` makes them; the hold: where the earliest
    match that is or may be in progress starts, else `len(text)`)."""
    size = len(text)
    hold = size
    matches: list[Any] = []
    accepted: list[Any] = []
    # A pattern none of whose first characters is in the (ASCII) text from `pos` on can
    # neither match nor be in progress there: most patterns, on most of a stream's text.
    rest = text[pos:]
    patterns: Sequence[ExactPattern] = plan.every
    hits: set[int] | None = None
    # Text from `pos` on shorter than a pattern's shortest match cannot hold a complete
    # one (a window's text mostly is: a word or two), Hyperscan or not.
    short = UNBOUNDED
    if rest.isascii():
        patterns = plan.for_chars(frozenset(rest))
        # While the text may go on: a prefiltered pattern Hyperscan reports no match of
        # (none ending at `pos` or later) has no complete match from `pos` on, at most one
        # in progress at the end, which has read the text from its start to the end: it
        # starts in the text's tail of the characters such a match reads, at one of its
        # first characters. Searched from there, and not at all when that is at or after
        # the hold another pattern already set. (The final scan searches every pattern, as
        # `find`'s exact reference.)
        if not final and text.isascii():
            short = size - pos
            # Worth its Hyperscan call only when there are a few patterns to spare a search.
            if len(patterns) >= _TAILS_FROM:
                hits = prefilter.ending_from(text, pos)
    tails: list[tuple[int, int, ExactPattern]] = []
    for position, exact in enumerate(patterns):
        if exact.tail_chars is not None and (
            short < exact.shortest
            or (hits is not None and exact.prefiltered >= 0 and exact.prefiltered not in hits)
        ):
            tail = tail_start(exact, text, pos)
            if tail < size:
                tails.append((tail, position, exact))
            continue
        hold = search_from(exact, text, pos, final, hold, matches, accepted)
    if tails:
        tails.sort(key=_by_tail)  # then catalog order (positions are distinct)
        for tail, _, exact in tails:
            if tail >= hold:
                break
            hold = search_from(exact, text, tail, final, hold, matches, accepted)
    return matches, accepted, hold


def _by_tail(tail: tuple[int, int, ExactPattern]) -> tuple[int, int]:
    return tail[0], tail[1]


def search_from(
    exact: ExactPattern, text: str, at: int, final: bool, hold: int, matches: list[Any], accepted: list[Any]
) -> int:
    """`exact`'s matches from `at` on, into `matches` and `accepted`, up to the first one that
    is (or may be) still in progress; the hold, lowered to where that one starts."""
    size = len(text)
    search = exact.pattern.search
    while (match := search(text, at, partial=not final)) is not None:
        if not final:
            # Most searches end here: a partial match (a word may become an address).
            if match.partial or match.end() + LOOKAHEAD > size:
                start = match.start()
                return start if start < hold else hold  # min() costs a call per search
            growing = _growing(exact, text, at, match)
            if growing is not None:
                return min(hold, growing)
        matches.append(match)
        found = exact.accept(match)
        if found is not None:
            accepted.append(found)
        at = _next(match, found)
    return hold


def tail_start(exact: ExactPattern, text: str, pos: int) -> int:
    """Where a match of `exact` still in progress at the end of `text` can start, at `pos` or
    later (`len(text)` when nowhere): in the text's tail of the characters such a match has
    read (`tail_chars`), at one of its first characters."""
    size = len(text)
    tail = max(len(text.rstrip(exact.tail_chars)), pos)
    if tail < size and exact.first_char is not None:
        first = exact.first_char.search(text, tail)
        tail = size if first is None else first.start()
    return tail


def _growing(exact: ExactPattern, text: str, at: int, match: Any) -> int | None:
    """The earliest start, from `at` to `match`'s, of a match that more text could still
    make or change (None when there is none): `match` is the leftmost the text holds now, a
    complete one that ends `LOOKAHEAD` characters or more before the end.

    With `partial`, `regex` prefers any complete match to a partial one, even a later or
    shorter one: in "a@bb.cc.uni-ex" it returns "a@bb.cc", although the greedy path that
    reached the end would win once "ample.de" arrives. So every start up to the returned
    match's is asked whether some path from it reaches the end of the text, consuming it or
    looking at it (a look-ahead reads at most `LOOKAHEAD` characters): only the starts a
    whole match's width from the end can."""
    size = len(text)
    start = int(match.start())
    pattern = exact.pattern
    for candidate in range(max(at, size - exact.width - LOOKAHEAD), start):
        # No complete match starts before `start`: a match here is a partial one.
        if pattern.match(text, candidate, partial=True) is not None:
            return candidate
    for end in range(size, max(start, size - LOOKAHEAD), -1):
        if pattern.fullmatch(text, start, end, partial=True) is not None:
            return start
    return None


def _next(match: Any, found: Any) -> int:
    """Where to look next: after an accepted match; one character on from a rejected one, so
    that "2 4111 1111 1111 1111" (no card: 17 digits) still yields the card after the 2."""
    if found is None or match.end() == match.start():
        return int(match.start()) + 1
    return int(match.end())
