"""The characters a pattern's match can begin with, so a stream's window can skip a pattern
whose first character appears nowhere in the text it scans; and every character a match can
read (`read_chars`), so a window looks for a match still in progress only in the text's tail
made of them.

A match of a pattern (complete or partial) that starts at a position inside the text
consumes that position's character first, and that character is always one of the pattern's
first characters. So when none of the text's characters from the scan's start on is one of
them, the pattern can neither match nor be in progress there, and searching it is wasted.

The set is of ASCII characters and holds for ASCII text only (the patterns run with ASCII
semantics, so on ASCII text a class or a case-insensitive letter matches ASCII characters
only): a scan of text with other characters in it searches every pattern. Computed from the
stdlib's parse of the pattern (the patterns are `re` syntax); anything it cannot say for sure
(a back-reference, a conditional, a pattern that can match the empty string, syntax `re`
does not parse) gives None: the pattern is always searched.
"""

from __future__ import annotations

import re
import string
from typing import Any

_parser: Any = getattr(re, "_parser", None)  # the stdlib's own parser (private, stable since 3.11)
_constants: Any = getattr(re, "_constants", None)

_ASCII = frozenset(chr(code) for code in range(128))
_DIGIT = frozenset(string.digits)
_WORD = frozenset(string.ascii_letters + string.digits + "_")
_SPACE = frozenset(c for c in _ASCII if c.isspace())  # a superset of every engine's ASCII \s
_CATEGORIES = {
    "CATEGORY_DIGIT": _DIGIT,
    "CATEGORY_NOT_DIGIT": _ASCII - _DIGIT,
    "CATEGORY_WORD": _WORD,
    "CATEGORY_NOT_WORD": _ASCII - _WORD,
    "CATEGORY_SPACE": _SPACE,
    "CATEGORY_NOT_SPACE": _ASCII - _SPACE,
}


def first_chars(pattern: str, ignore_case: bool) -> frozenset[str] | None:
    """The ASCII characters every match of `pattern` in ASCII text begins with; None when not known."""
    if _parser is None or _constants is None:
        return None
    try:
        parsed = _parser.parse(pattern)
        if parsed.state.flags & ~(_constants.SRE_FLAG_UNICODE | _constants.SRE_FLAG_ASCII):
            return None  # inline flags (verbose, ignore-case...) change what the parse means
        found = _sequence(parsed)
    except Exception:  # any trouble parsing it means: search it always
        return None
    if found is None:
        return None
    chars, can_be_empty = found
    if can_be_empty or not chars:
        return None
    if ignore_case:
        chars = _both_cases(chars)
    return frozenset(chars)


def read_chars(pattern: str, ignore_case: bool) -> frozenset[str] | None:
    """The ASCII characters a match of `pattern` in progress at the end of an ASCII text can
    have read from its start on: what it consumes, and what a look-ahead reads before it is
    decided; None when not known.

    A partial match (one that needs more text) has read every character from its start to the
    end of the text, so it starts within the text's longest tail of these characters. A
    look-behind reads only characters the match consumed, or ones before its start."""
    if _parser is None or _constants is None:
        return None
    try:
        parsed = _parser.parse(pattern)
        if parsed.state.flags & ~(_constants.SRE_FLAG_UNICODE | _constants.SRE_FLAG_ASCII):
            return None
        chars = _read(parsed)
    except Exception:
        return None
    if chars is None:
        return None
    return frozenset(_both_cases(chars) if ignore_case else chars)


def _read(nodes: Any) -> set[str] | None:
    chars: set[str] = set()
    for op, av in nodes:
        name = str(op)
        if name in _SINGLE:
            found = _node(name, av)
            if found is None:
                return None
            chars |= found[0]
            continue
        if name == "AT":
            continue
        if name in ("ASSERT", "ASSERT_NOT"):
            direction, sub = av
            if direction < 0:
                continue  # a look-behind reads only what the match consumed, or before its start
            body = _read_ahead(sub)
        elif name == "SUBPATTERN":
            _group, add_flags, del_flags, sub = av
            if add_flags & ~_constants.SRE_FLAG_IGNORECASE or del_flags:
                return None
            body = _read(sub)
            if body is not None and add_flags:
                body = _both_cases(body)
        elif name == "ATOMIC_GROUP":
            body = _read(av)
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            body = _read(av[2])
        elif name == "BRANCH":
            body = set()
            for branch in av[1]:
                found_branch = _read(branch)
                if found_branch is None:
                    return None
                body |= found_branch
        else:
            return None  # back-references, conditionals...
        if body is None:
            return None
        chars |= body
    return chars


def _read_ahead(nodes: Any) -> set[str] | None:
    """What a look-ahead can read and still need more text: its body's characters, but for a
    last single character, which completes the body (the look-ahead is then decided)."""
    if len(nodes) == 1 and str(nodes[0][0]) == "BRANCH":
        chars: set[str] = set()
        for branch in nodes[0][1][1]:
            found = _read_ahead(branch)
            if found is None:
                return None
            chars |= found
        return chars
    if len(nodes) and str(nodes[-1][0]) in _SINGLE:
        return _read(nodes[:-1])
    return _read(nodes)


_SINGLE = ("LITERAL", "NOT_LITERAL", "ANY", "IN", "CATEGORY")


def _both_cases(chars: set[str]) -> set[str]:
    return chars | {c.swapcase() for c in chars}


# (characters, whether what was looked at can match the empty string); None: not known.
_First = tuple[set[str], bool] | None


def _sequence(nodes: Any) -> _First:
    chars: set[str] = set()
    for op, av in nodes:
        found = _node(str(op), av)
        if found is None:
            return None
        node_chars, can_be_empty = found
        chars |= node_chars
        if not can_be_empty:
            return chars, False
    return chars, True


def _node(name: str, av: Any) -> _First:
    if name == "LITERAL":
        return ({chr(av)} & _ASCII), False
    if name == "NOT_LITERAL":
        return set(_ASCII - {chr(av)}), False
    if name == "ANY":
        return set(_ASCII), False
    if name == "IN":
        members = _class(av)
        return None if members is None else (members, False)
    if name == "CATEGORY":
        known = _CATEGORIES.get(str(av))
        return None if known is None else (set(known), False)
    if name in ("AT", "ASSERT", "ASSERT_NOT"):
        return set(), True  # consumes nothing: the first character is the next element's
    if name == "SUBPATTERN":
        _group, add_flags, del_flags, body = av
        if add_flags & ~_constants.SRE_FLAG_IGNORECASE or del_flags:
            return None
        found = _sequence(body)
        if found is None or not add_flags:
            return found
        return _both_cases(found[0]), found[1]
    if name == "ATOMIC_GROUP":
        return _sequence(av)
    if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        low, _high, body = av
        found = _sequence(body)
        if found is None:
            return None
        return found[0], found[1] or low == 0
    if name == "BRANCH":
        chars: set[str] = set()
        can_be_empty = False
        for branch in av[1]:
            found = _sequence(branch)
            if found is None:
                return None
            chars |= found[0]
            can_be_empty = can_be_empty or found[1]
        return chars, can_be_empty
    return None  # back-references, conditionals...


def _class(items: Any) -> set[str] | None:
    chars: set[str] = set()
    negated = False
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            negated = True
        elif name == "LITERAL":
            chars.add(chr(av))
        elif name == "RANGE":
            low, high = av
            chars.update(chr(code) for code in range(low, min(high, 127) + 1))
        elif name == "CATEGORY":
            known = _CATEGORIES.get(str(av))
            if known is None:
                return None
            chars |= known
        else:
            return None
    return set(_ASCII - chars) if negated else chars & _ASCII
