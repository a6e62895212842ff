"""Rego text as tokens: comments dropped, string contents blanked, each token with its line
and bracket depth. Not a parser, only sure enough for the loader's checks (rego_checks)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from adapters.policy.source import PolicyLoadError

_TOKEN = re.compile(
    r"""(?P<space>\s+)|(?P<comment>\#[^\n]*)|(?P<string>"(?:[^"\\\n]|\\.)*"|`[^`]*`)
    |(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
    |(?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    |(?P<op>:=|==|!=|<=|>=|[{}()\[\],;:=<>+\-*/%&|.!])""",
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # name, number, string, op
    text: str
    line: int
    depth: int  # nesting of (), [] and {} before this token
    line_start: bool  # first token on its line


def tokens(text: str) -> list[Token]:
    found: list[Token] = []
    depth, line, line_start, position = 0, 1, True, 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise PolicyLoadError(f"line {line}: unexpected character {text[position]!r}")
        kind, value = match.lastgroup or "", match.group()
        position = match.end()
        if kind in ("space", "comment"):
            newlines = value.count("\n")
            line += newlines
            line_start = line_start or newlines > 0
            continue
        if kind == "string":
            value = '"%q"' if value.startswith('"') and "%q" in value else '""'
        if value in ")]}":
            depth = max(depth - 1, 0)
        found.append(Token(kind, value, line, depth, line_start))
        if value in "([{" and kind == "op":
            depth += 1
        line_start = False
        if kind == "string":
            line += match.group().count("\n")
    return found
