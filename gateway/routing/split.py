"""A split: an alias's weighted candidates share its sessions, each session on one arm.

Weighted rendezvous hashing: every weighted candidate scores a session `-ln(u) / weight`,
`u` a uniform draw made from the session key and the candidate (the same in every process),
and the lowest score wins. A session therefore lands on an arm with probability weight /
total, always the same arm (its prefix cache stays warm), and changing one weight moves only
the sessions that must move. The chosen arm goes first; the other candidates stay behind it
as fallbacks, in their configured order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gateway.exchange import Candidate
from gateway.routing.rendezvous import stable_hash, weight

_TWO_64 = float(1 << 64)


class Split:
    """The weighted candidates of one alias, their hashes computed once."""

    def __init__(self, candidates: Sequence[Candidate]) -> None:
        self._arms = tuple((c, stable_hash(c.arm), c.weight) for c in candidates if c.weight is not None)

    def __bool__(self) -> bool:
        return len(self._arms) > 1

    def arm(self, session_key: str, allowed: Sequence[Candidate]) -> Candidate | None:
        """The arm of a session among the weighted candidates still allowed; None if none is."""
        key_hash = stable_hash(session_key)
        best: Candidate | None = None
        best_score = math.inf
        for candidate, arm_hash, share in self._arms:
            if share is None or candidate not in allowed:
                continue
            uniform = (weight(key_hash, arm_hash) + 0.5) / _TWO_64
            score = -math.log(uniform) / share
            if score < best_score:
                best, best_score = candidate, score
        return best

    def ordered(self, session_key: str | None, candidates: Sequence[Candidate]) -> list[Candidate]:
        """`candidates` with the session's arm first."""
        if session_key is None:
            return list(candidates)
        chosen = self.arm(session_key, candidates)
        if chosen is None:
            return list(candidates)
        return [chosen, *(c for c in candidates if c is not chosen)]
