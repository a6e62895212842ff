"""What a catalog found in the long texts it has already scanned, by each text's digest.

An agent session sends its whole history again on every turn, so without this a request's
redaction would scan every earlier message once more, turn after turn: a session's cost
would grow with the square of its length. A long text seen before (the same characters,
for the same kinds) gets what was found in it then, from a bounded LRU table.

Only digests (BLAKE2b, 128 bits) and entity positions are kept, never text or values, so
the table holds nothing sensitive. Detection is a pure function of the text and the kinds
(validators included), so a remembered answer is the answer a new scan would give. Short
texts are scanned each time: hashing them would cost about what scanning them does.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")

MIN_CHARS = 512
"""Texts shorter than this are not remembered."""
MAX_ENTRIES = 8192
"""The most texts remembered per catalog (a few hundred bytes each); least recently used go first."""


class SeenTexts(Generic[T]):
    """`T`: what a scan finds (the detector's `Found`)."""

    def __init__(self, min_chars: int = MIN_CHARS, max_entries: int = MAX_ENTRIES) -> None:
        self._min_chars = min_chars
        self._max_entries = max_entries
        self._table: OrderedDict[tuple[frozenset[str], bytes], tuple[T, ...]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._table)

    def find(self, text: str, names: frozenset[str], scan: Callable[[], Sequence[T]]) -> Sequence[T]:
        """What `scan()` finds in `text` for the kinds `names`: remembered, or scanned now."""
        if len(text) < self._min_chars:
            return scan()
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        key = (names, digest)
        table = self._table
        found = table.get(key)
        if found is not None:
            table.move_to_end(key)
            self.hits += 1
            return found
        self.misses += 1
        found = tuple(scan())
        table[key] = found
        if len(table) > self._max_entries:
            table.popitem(last=False)
        return found

    def clear(self) -> None:
        self._table.clear()
