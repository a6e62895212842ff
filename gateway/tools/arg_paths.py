"""Argument paths: where in a tool call's arguments a constrained value lives.

A path is dot-separated keys, each optionally followed by array steps:

    "url"              arguments["url"]
    "target.url"       arguments["target"]["url"]
    "urls[0]"          the first element of arguments["urls"]
    "urls[*]"          every element of arguments["urls"]
    "hops.*.url"       "url" of every element of the array (or every value of the object) "hops"

Keys that contain ".", "[" or "]" cannot be named. A path that leads nowhere (a missing
key, an index past the end) finds nothing, or, for a required argument, is a
`MissingArgument`; a `*` over an empty array or object finds nothing either way. A path
that meets the wrong shape (a key looked up in an array, an index in an object, anything
looked up in a JSON null) is a `ShapeMismatch`. Callers treat both as violations:
arguments that do not have the shape the policy expects are not checked by guessing.
A JSON null at the end of a path is found like any other value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

EVERY: Final = "*"
Step = str | int  # a key, an array index, or EVERY

_SEGMENT = re.compile(r"(?P<key>[^.\[\]]*)(?P<steps>(?:\[(?:\d+|\*)\])*)")
_STEP = re.compile(r"\[(\d+|\*)\]")


class InvalidPath(ValueError):
    """The policy named an argument path this syntax cannot express."""


class ShapeMismatch(ValueError):
    """The arguments do not have the shape the path expects."""


class MissingArgument(ValueError):
    """A required path leads nowhere."""


def parse_path(path: str) -> tuple[Step, ...]:
    steps: list[Step] = []
    for segment in path.split("."):
        match = _SEGMENT.fullmatch(segment)
        if match is None or not segment:
            raise InvalidPath(f"invalid argument path {path!r}")
        key = match.group("key")
        if key == EVERY:
            steps.append(EVERY)
        elif key:
            steps.append(key)
        elif not steps and not match.group("steps"):
            raise InvalidPath(f"invalid argument path {path!r}")
        for index in _STEP.findall(match.group("steps")):
            steps.append(EVERY if index == EVERY else int(index))
    if not steps:
        raise InvalidPath(f"invalid argument path {path!r}")
    return tuple(steps)


def values_at(
    document: Any, steps: tuple[Step, ...], where: str = "arguments", *, required: bool = False
) -> Iterator[Any]:
    """Every value the path leads to, JSON nulls included."""
    if not steps:
        yield document
        return
    step, rest = steps[0], steps[1:]
    if step == EVERY:
        if isinstance(document, list):
            for i, item in enumerate(document):
                yield from values_at(item, rest, f"{where}[{i}]", required=required)
        elif isinstance(document, dict):
            for key, item in document.items():
                yield from values_at(item, rest, f"{where}.{key}", required=required)
        else:
            raise ShapeMismatch(f"{where} is not an array or an object")
    elif isinstance(step, int):
        if not isinstance(document, list):
            raise ShapeMismatch(f"{where} is not an array")
        if step < len(document):
            yield from values_at(document[step], rest, f"{where}[{step}]", required=required)
        elif required:
            raise MissingArgument(f"{where}[{step}] is missing")
    else:
        if not isinstance(document, dict):
            raise ShapeMismatch(f"{where} is not an object")
        if step in document:
            yield from values_at(document[step], rest, f"{where}.{step}", required=required)
        elif required:
            raise MissingArgument(f"{where}.{step} is missing")
