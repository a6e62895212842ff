"""Decisions remembered per policy revision, keyed by the canonical input document.

The cache belongs to one revision at a time: asking it about another revision (the policy
was reloaded) empties it, so a decision never outlives the policy that made it. It is
bounded (least recently used entries go first) and, optionally, entries expire.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.policy.decision import Decision


@dataclass(frozen=True, slots=True)
class CachedDecision:
    decision: Decision
    raw: Any  # the engine's answer, for the decision log
    stored_at: float


class DecisionCache:
    def __init__(
        self,
        max_entries: int,
        ttl_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_entries = max_entries
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[bytes, CachedDecision] = OrderedDict()
        self._revision: str | None = None
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.invalidations = 0  # times a new revision emptied it

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, revision: str, key: bytes) -> CachedDecision | None:
        if revision != self._revision:
            self._switch(revision)
        entry = self._entries.get(key)
        if entry is None or (self._ttl_s is not None and self._clock() - entry.stored_at > self._ttl_s):
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry

    def put(self, revision: str, key: bytes, decision: Decision, raw: Any) -> None:
        if revision != self._revision:
            self._switch(revision)
        self._entries[key] = CachedDecision(decision, raw, self._clock())
        self._entries.move_to_end(key)
        if len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
            self.evictions += 1

    def _switch(self, revision: str) -> None:
        if self._entries:
            self.invalidations += 1
        self._entries.clear()
        self._revision = revision
