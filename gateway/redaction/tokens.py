"""Tokenisation: stable placeholders for one request, and putting the values back.

A value found in the request becomes `<KIND_n>` (the same value, the same placeholder)
before the upstream sees it; the answer's placeholders are swapped back before the
client sees it. The vault lives on the request's Exchange only, so a placeholder never
means anything to another request, let alone another tenant. Placeholders already
written in the request by the client are never issued, and a placeholder the model
invents is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson
import regex

from gateway.redaction.detector import Found

PLACEHOLDER = regex.compile(r"<([A-Z][A-Z0-9_]{0,39})_([1-9][0-9]{0,5})>", regex.ASCII)


def placeholders_in(text: str) -> Iterable[str]:
    if "<" not in text:
        return ()
    return (match.group() for match in PLACEHOLDER.finditer(text))


class Vault:
    """The placeholders issued for one request and the values they stand for."""

    __slots__ = ("_counts", "_issued", "_reserved", "_values")

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._reserved = set(reserved)
        self._issued: dict[tuple[str, str], str] = {}  # (kind, value) -> placeholder
        self._values: dict[str, str] = {}  # placeholder -> value
        self._counts: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._values)

    def placeholder(self, kind: str, value: str) -> str:
        issued = self._issued.get((kind, value))
        if issued is not None:
            return issued
        count = self._counts.get(kind, 0)
        while True:
            count += 1
            candidate = f"<{kind}_{count}>"
            if candidate not in self._reserved:
                break
        self._counts[kind] = count
        self._issued[(kind, value)] = candidate
        self._values[candidate] = value
        return candidate

    def value(self, placeholder: str) -> str | None:
        return self._values.get(placeholder)

    def restore(self, found: Found, placeholder: str) -> str:
        """The value for a placeholder found in plain text."""
        return self._values.get(placeholder, placeholder)

    def restore_in_json(self, found: Found, placeholder: str) -> str:
        """The value for a placeholder found inside JSON text (tool-call arguments): escaped."""
        value = self._values.get(placeholder)
        if value is None:
            return placeholder
        return orjson.dumps(value).decode()[1:-1]


class PlaceholderFinder:
    """Finds the placeholders a vault issued; a `Finder` for the sliding window."""

    __slots__ = ("_vault",)

    def __init__(self, vault: Vault) -> None:
        self._vault = vault

    def find(self, text: str) -> list[Found]:
        found, _ = self.scan(text, 0, final=True)
        return found

    def scan(self, text: str, pos: int, final: bool = False) -> tuple[list[Found], int]:
        if text.find("<", pos) < 0:
            return [], len(text)
        found: list[Found] = []
        for match in PLACEHOLDER.finditer(text, pos, partial=not final):
            if match.partial:
                return found, match.start()
            if self._vault.value(match.group()) is not None:
                start, end = match.span()
                found.append(Found(start, end, match.group(1), start, end))
        return found, len(text)
