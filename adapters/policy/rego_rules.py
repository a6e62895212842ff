"""A module's tokens grouped into its rules, and what the checks need to know of each.

A rule is every token from one that starts a line outside any bracket up to the next
such token (`else` branches and multi-line bodies belong to the rule they continue).
`package` and `import` statements are not rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from adapters.policy.rego_tokens import Token

KEYWORDS = frozenset(
    {"if", "in", "not", "some", "every", "contains", "else", "with", "as", "default", "import", "package"}
    | {"true", "false", "null"}
)
# `contains` is also a builtin: `contains(s, ":")` is a call, `deny contains msg` a keyword.
BUILTIN_KEYWORDS = frozenset({"contains"})
_OPENING = {")": "(", "]": "[", "}": "{"}
_CLOSING = {"(": ")", "[": "]", "{": "}"}


@dataclass(frozen=True, slots=True)
class Rule:
    name: str  # the first part of the rule's name: "deny" for `deny contains msg if ...`
    tokens: tuple[Token, ...]  # the whole statement, head and body
    params: frozenset[str]  # a function's parameters that are variables
    is_function: bool
    has_default: bool  # a `default name := ...` statement
    always_defined: bool  # partial (`contains`, `name[key]`) or a comprehension without a body

    @property
    def line(self) -> int:
        return self.tokens[0].line


def rules(toks: Sequence[Token]) -> list[Rule]:
    starts = [
        i
        for i, tok in enumerate(toks)
        if tok.depth == 0 and tok.line_start and tok.kind == "name" and tok.text != "else"
    ]
    found: list[Rule] = []
    for start, end in zip(starts, [*starts[1:], len(toks)], strict=True):
        statement = tuple(toks[start:end])
        if statement[0].text in ("package", "import"):
            continue
        found.append(_rule(statement))
    return found


def _rule(statement: tuple[Token, ...]) -> Rule:
    has_default = statement[0].text == "default" and len(statement) > 1
    head = statement[1] if has_default else statement[0]
    following = statement[2 if has_default else 1] if len(statement) > (2 if has_default else 1) else None
    is_function = following is not None and following.text == "("
    params: frozenset[str] = frozenset()
    if is_function:
        start = 2 if has_default else 1
        end = matching(statement, start)
        params = (
            frozenset(t.text for t in statement[start + 1 : end] if t.kind == "name" and "." not in t.text)
            - KEYWORDS
        )
    partial = following is not None and following.text in ("contains", "[")
    return Rule(
        head.text.split(".", 1)[0],
        statement,
        params,
        is_function,
        has_default,
        partial or _comprehension_value(statement),
    )


def _comprehension_value(statement: tuple[Token, ...]) -> bool:
    """`name := {x | ...}` (or `[...]`) with no `if`: defined, if only as an empty
    collection; and `name := <a constant>`."""
    if len(statement) < 3 or statement[1].text not in (":=", "="):
        return False
    value = statement[2:]
    if all(t.kind in ("string", "number", "op") or t.text in ("true", "false", "null") for t in value):
        return True
    if statement[2].text not in ("[", "{"):
        return False
    end = matching(statement, 2)
    inner = statement[3:end]
    return end == len(statement) - 1 and any(t.text == "|" and t.depth == 1 for t in inner)


def matching(toks: Sequence[Token], index: int) -> int:
    """The index of the bracket closing the one at `index` (the last index when unclosed)."""
    opening = toks[index].text
    closing = _CLOSING[opening]
    depth = 0
    for i in range(index, len(toks)):
        text = toks[i].text
        if toks[i].kind != "op":
            continue
        if text == opening:
            depth += 1
        elif text == closing:
            depth -= 1
            if depth == 0:
                return i
    return len(toks) - 1


def opening(toks: Sequence[Token], index: int) -> int:
    """The index of the bracket opening the one closing at `index` (0 when unopened)."""
    closing = toks[index].text
    wanted = _OPENING[closing]
    depth = 0
    for i in range(index, -1, -1):
        text = toks[i].text
        if toks[i].kind != "op":
            continue
        if text == closing:
            depth += 1
        elif text == wanted:
            depth -= 1
            if depth == 0:
                return i
    return 0


def expression_end(toks: Sequence[Token], index: int) -> int:
    """The index just past the expression that starts after toks[index]."""
    depth = toks[index].depth
    j = index + 1
    while j < len(toks):
        tok = toks[j]
        if tok.depth < depth or (tok.depth == depth and (tok.line_start or tok.text in (";", "|", ","))):
            break
        j += 1
    return j
