"""The two marks the scrubber (gateway/redaction/scrub.py) reads on what it is given: a string
the gateway rendered itself (`Verbatim`), and a dict whose content is fixed (`Settled`).

Plain Python, apart from the compiled scrubber: subclasses of str and dict (docs/architecture.md,
Compiled request path).
"""

from __future__ import annotations

from typing import Any


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
