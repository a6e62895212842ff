"""Where in a text an entity may be: Hyperscan, scanning every pattern at once.

Hyperscan runs all patterns in one pass at memory speed but has no look-arounds and
reports only where matches end (every end, not Python's leftmost-first matches). So it is
used as a prefilter only: each pattern is loosened into one that matches a superset of
what the exact pattern matches (look-behinds become a consumed character or nothing,
look-aheads likewise, long bounded repeats unbounded), and the exact pattern, with its
validator, then runs on the few regions Hyperscan reported: from the pattern's widest
match before a reported end to just after it. Every exact match lies inside a region, so
the result is the same as scanning the whole text exactly.

Hyperscan sees bytes: a non-ASCII character is replaced by "?" so that byte offsets stay
character offsets. The built-in patterns are ASCII-only and treat "?" and any non-ASCII
character alike, which keeps the superset property; a class that admits any non-ASCII
character (`entities.NON_ASCII`) admits "?" in its loosened form.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import cast

import hyperscan

from gateway.redaction.entities import NON_ASCII

_BOUNDED_REPEAT = re.compile(r"\{(\d+),(\d+)\}")
_LONG_REPEAT = 16  # long bounded repeats make large automata; unbounded ones are cheaper
_WIDEST = 1 << 16
_SIMPLE_CLASS = re.compile(r"^\[[^\[\]]+\]$|^\\.$|^[^\\\[\]()|*+?{}.^$]$")


def loosened(pattern: str) -> str:
    """A Hyperscan pattern matching a superset of `pattern`'s matches (see the module doc)."""
    pattern = pattern.replace(NON_ASCII, "?")
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i : i + 2])
            i += 2
        elif char == "[":
            end = _class_end(pattern, i)
            out.append(pattern[i:end])
            i = end
        elif pattern.startswith(("(?<!", "(?<=", "(?!", "(?="), i):
            head = 4 if pattern[i + 2] == "<" else 3
            end = _group_end(pattern, i)
            body = pattern[i + head : end - 1]
            negative = pattern[i + head - 1] == "!"
            # "Not X and not Y" is loosened to "not X": one single-character alternative is enough.
            simple = next((alt for alt in _alternatives(body) if _SIMPLE_CLASS.match(alt)), None)
            if negative and simple is not None:
                excluded = _negate(simple)
                # (?<!X) becomes "start of text or one character that is not X", consumed.
                out.append(f"(?:^|{excluded})" if head == 4 else f"(?:{excluded}|$)")
            i = end
        elif pattern.startswith("(?P<", i):
            out.append("(")
            i = pattern.index(">", i) + 1
        else:
            out.append(char)
            i += 1
    return _BOUNDED_REPEAT.sub(_unbound, "".join(out))


def _unbound(match: re.Match[str]) -> str:
    low, high = int(match.group(1)), int(match.group(2))
    return f"{{{low},}}" if high >= _LONG_REPEAT else match.group(0)


def _negate(body: str) -> str:
    if body.startswith("[^"):
        return "[" + body[2:]
    if body.startswith("["):
        return "[^" + body[1:]
    return "[^" + body + "]"


def _class_end(pattern: str, start: int) -> int:
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1
    while pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i + 1


def _alternatives(body: str) -> list[str]:
    """`body` split at its top-level "|"."""
    parts: list[str] = []
    depth, i, last = 0, 0, 0
    while i < len(body):
        char = body[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i = _class_end(body, i)
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(body[last:i])
            last = i + 1
        i += 1
    parts.append(body[last:])
    return parts


def _group_end(pattern: str, start: int) -> int:
    depth, i = 0, start
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i = _class_end(pattern, i)
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"unbalanced group in {pattern!r}")


def max_width(pattern: str) -> int | None:
    """The longest text `pattern` can match, or None when unbounded or unknown."""
    try:
        # The stdlib's own parser (private, stable since 3.11) knows every pattern's width.
        width: int = re._parser.parse(pattern).getwidth()[1]  # type: ignore[attr-defined]
    except (re.error, AttributeError, RecursionError):
        return None
    return width if width <= _WIDEST else None


def min_width(pattern: str) -> int:
    """The shortest text `pattern` can match (0 when unknown)."""
    try:
        width: int = re._parser.parse(pattern).getwidth()[0]  # type: ignore[attr-defined]
    except (re.error, AttributeError, RecursionError):
        return 0
    return width


def compilable(pattern: str) -> bool:
    """Whether Hyperscan accepts the loosened form of `pattern`."""
    try:
        Prefilter([(pattern, 1)])
    except (hyperscan.error, ValueError, IndexError):
        return False
    return True


class Prefilter:
    """Candidate regions per pattern: `regions(text)[i]` lists (start, end) spans, merged
    where they overlap, that contain every match of pattern `i` (of at most `width` characters)."""

    def __init__(self, patterns: Sequence[tuple[str, int]]) -> None:
        self.size = len(patterns)
        self._widths = [width for _, width in patterns]
        self._database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        if patterns:
            # Without start-of-match tracking, which costs several times the scan: a match
            # ending at `end` starts at `end - width` at the earliest.
            self._database.compile(
                expressions=[loosened(source).encode() for source, _ in patterns],
                ids=list(range(len(patterns))),
                elements=len(patterns),
                flags=[hyperscan.HS_FLAG_ALLOWEMPTY] * len(patterns),
            )
            self._scratch = hyperscan.Scratch(self._database)
        widths = self._widths

        def on_match(
            pattern: int, start: int, end: int, flags: int, found: dict[int, list[list[int]]]
        ) -> None:
            begin = end - widths[pattern] - 1  # one more for a consumed look-behind character
            spans = found.get(pattern)
            if spans is None:
                found[pattern] = [[begin, end]]
            elif begin <= spans[-1][1]:  # ends arrive in order, so only the last can overlap
                spans[-1][1] = end
            else:
                spans.append([begin, end])

        # Made once: a scan passes it the table it fills as its context.
        self._on_match = cast(Callable[[int, int, int, int, object], None], on_match)

        def on_match_from(
            pattern: int, start: int, end: int, flags: int, wanted: tuple[int, set[int]]
        ) -> None:
            if end >= wanted[0]:
                wanted[1].add(pattern)

        self._on_match_from = cast(Callable[[int, int, int, int, object], None], on_match_from)
        # Scratch space may serve one scan at a time, and scans release the GIL: one per thread.
        self._local = threading.local()

    def regions(self, text: str) -> dict[int, list[list[int]]]:
        if not self.size or not text:
            return {}
        data = text.encode("ascii") if text.isascii() else text.encode("ascii", "replace")
        found: dict[int, list[list[int]]] = {}
        self._database.scan(
            data, match_event_handler=self._on_match, context=found, scratch=self._thread_scratch()
        )
        for spans in found.values():
            spans[0][0] = max(spans[0][0], 0)
        return found

    def ending_from(self, text: str, pos: int) -> set[int]:
        """The patterns with a match ending at `pos` or later (`text` is ASCII)."""
        found: set[int] = set()
        if self.size and text:
            self._database.scan(
                text.encode("ascii"),
                match_event_handler=self._on_match_from,
                context=(pos, found),
                scratch=self._thread_scratch(),
            )
        return found

    def _thread_scratch(self) -> hyperscan.Scratch:
        scratch: hyperscan.Scratch | None = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._scratch.clone()
            self._local.scratch = scratch
        return scratch
