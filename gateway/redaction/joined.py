"""Scanning several strings at once: joined by a separator no pattern can match across, one
scan tells whether any of them holds an entity, where a scan each would cost a call each.

It holds for a pattern that finds a match in the joined string whenever it finds one in any
of the strings alone (`separator_blind`); what the joined scan finds beyond that (a match
across the separator) only ever sends the caller back to scanning each string.
"""

from __future__ import annotations

import re
from typing import Any

SEPARATOR = "\x00"

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
