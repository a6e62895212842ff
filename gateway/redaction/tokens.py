"""Tokenisation: stable placeholders for one request, and putting the values back.

A value found in the request becomes `<KIND_n>` (the same value, the same placeholder)
before the upstream sees it; the answer's placeholders are swapped back before the
client sees it. The vault lives on the request's Exchange only, so a placeholder never
means anything to another request, let alone another tenant. Placeholders already
written in the request by the client are never issued, and a placeholder the model
invents is left as it is.

A `tokenize` answer is read by `RestoreOrMask`: the placeholders the vault issued are
restored, and a value the model wrote on its own (one that was never a placeholder: from
its training, a guess, a tool result it repeats) is masked as `mask` would: only what the
client sent comes back to it as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

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


class _Scanner(Protocol):
    def find(self, text: str) -> list[Found]: ...

    def scan(self, text: str, pos: int, final: bool = False) -> tuple[list[Found], int]: ...


class RestoreOrMask:
    """A `Finder` for a `tokenize` answer: the placeholders `vault` issued and the entities
    `detector` finds, in one ordered list; `replacement` restores the first and masks the rest."""

    __slots__ = ("_detector", "_placeholders", "_vault")

    def __init__(self, vault: Vault, detector: _Scanner) -> None:
        self._vault = vault
        self._placeholders = PlaceholderFinder(vault)
        self._detector = detector

    def find(self, text: str) -> list[Found]:
        found, _ = self.scan(text, 0, final=True)
        return found

    def scan(self, text: str, pos: int, final: bool = False) -> tuple[list[Found], int]:
        placeholders, placeholders_hold = self._placeholders.scan(text, pos, final)
        entities, entities_hold = self._detector.scan(text, pos, final)
        hold = min(placeholders_hold, entities_hold)
        if not entities:
            found = placeholders
        elif not placeholders:
            found = entities
        else:  # earliest first, then longest; one that overlaps an earlier one is dropped
            found = []
            for item in sorted((*placeholders, *entities), key=lambda f: (f.start, f.start - f.end)):
                if not found or item.start >= found[-1].end:
                    found.append(item)
        kept: list[Found] = []
        for item in found:
            if item.end > hold:  # the other finder holds back from before its end: so does this one
                hold = min(hold, item.start)
                break
            kept.append(item)
        return kept, hold

    def replacement(self, in_json: bool) -> Callable[[Found, str], str]:
        vault = self._vault
        restore = vault.restore_in_json if in_json else vault.restore

        def replace(found: Found, value: str) -> str:
            if vault.value(value) is not None:
                return restore(found, value)
            return f"[{found.kind}]"

        return replace
