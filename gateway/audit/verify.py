"""Checking a chain: the first record that does not follow from the ones before it, and why.

altered     its hash does not match its content, or its prev_hash does not match the
            record before it (that one was changed and its hash recomputed)
removed     records are missing before it (its seq jumps ahead)
reordered   it sits out of place: its seq was expected elsewhere, or repeats
unreadable  not a JSON object with seq, prev_hash and hash
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import orjson

from gateway.audit.chain import GENESIS, record_hash

ProblemKind = Literal["altered", "removed", "reordered", "unreadable"]


@dataclass(frozen=True, slots=True)
class Problem:
    position: int  # 1-based position in the log (line number for a file)
    seq: int | None  # the seq the record claims, when it has one
    kind: ProblemKind
    detail: str

    def __str__(self) -> str:
        where = f"record {self.position}" + (f" (seq {self.seq})" if self.seq is not None else "")
        return f"{where}: {self.kind}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Report:
    records: int  # records checked
    head_hash: str  # hash of the last good record
    problem: Problem | None

    @property
    def ok(self) -> bool:
        return self.problem is None


def verify_chain(entries: Iterable[bytes | str]) -> Report:
    """Check stored records in order; stops at the first problem. Blank entries are skipped."""
    parsed: list[tuple[int, dict[str, object] | None]] = []
    for position, entry in enumerate(entries, start=1):
        if not entry.strip():
            continue
        try:
            value = orjson.loads(entry)
        except orjson.JSONDecodeError:
            value = None
        parsed.append((position, value if isinstance(value, dict) else None))
    claimed = {r.get("seq") for _, r in parsed if r is not None}
    expected_seq, prev_hash = 1, GENESIS
    for count, (position, record) in enumerate(parsed):
        problem = _check(position, record, expected_seq, prev_hash, claimed)
        if problem is not None:
            return Report(count, prev_hash, problem)
        assert record is not None
        expected_seq, prev_hash = expected_seq + 1, str(record["hash"])
    return Report(len(parsed), prev_hash, None)


def _check(
    position: int, record: dict[str, object] | None, expected: int, prev_hash: str, claimed: set[object]
) -> Problem | None:
    if record is None:
        return Problem(position, None, "unreadable", "not a JSON object")
    seq, stored_prev, stored_hash = record.get("seq"), record.get("prev_hash"), record.get("hash")
    if not isinstance(seq, int) or not isinstance(stored_prev, str) or not isinstance(stored_hash, str):
        return Problem(position, None, "unreadable", "seq, prev_hash or hash is missing")
    if record_hash(record) != stored_hash:
        return Problem(position, seq, "altered", "its content does not match its hash")
    if seq > expected:
        if expected in claimed:
            return Problem(position, seq, "reordered", f"expected seq {expected} here; it appears later")
        missing = f"seq {expected}" if seq == expected + 1 else f"seq {expected} to {seq - 1}"
        return Problem(position, seq, "removed", f"{missing} missing before it")
    if seq < expected:
        return Problem(
            position, seq, "reordered", f"expected seq {expected} here; seq {seq} was already seen"
        )
    if stored_prev != prev_hash:
        what = "the previous record" if expected > 1 else "the start of the log"
        return Problem(
            position, seq, "altered", f"prev_hash does not match {what} (it was changed or replaced)"
        )
    return None
