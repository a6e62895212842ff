"""Hash chaining: each record carries its position and the hash of the one before it.

    seq        1, 2, 3, ... with no gap
    prev_hash  the previous record's `hash` (GENESIS for the first)
    hash       sha256 hex of prev_hash + the canonical JSON of the record without `hash`

Canonical JSON is orjson's output with keys sorted at every level; a record read back
and serialised again gives the same bytes, so anyone can recompute every hash. A stored
line (`sealed_line`) is that canonical JSON with `hash` appended as its last key: the
record is serialised once, and the hash needs no key order of the line. Editing a
record changes its hash; recomputing it breaks the next record's `prev_hash`; removing or
swapping records breaks `seq`. Only rewriting the whole tail goes unseen, which is why
`verify` prints the head hash for anchoring elsewhere.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

GENESIS = "0" * 64
CHAIN_FIELDS = ("seq", "prev_hash", "hash")


@dataclass(slots=True, init=False)
class ChainHead:
    """The last record of a chain: where the next one attaches."""

    seq: int
    hash: str

    def __init__(self, seq: int = 0, hash: str = GENESIS) -> None:
        self.seq = seq
        self.hash = hash


def canonical(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS, default=str)


def record_hash(record: dict[str, Any]) -> str:
    """The hash a sealed record should carry (its own `hash` field is ignored)."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return hashlib.sha256(str(body.get("prev_hash", "")).encode() + canonical(body)).hexdigest()


def seal(record: dict[str, Any], head: ChainHead) -> tuple[dict[str, Any], ChainHead]:
    """`record` attached after `head`, and the new head. The caller's dict is not changed."""
    sealed = {k: v for k, v in record.items() if k not in CHAIN_FIELDS}
    sealed["seq"] = head.seq + 1
    sealed["prev_hash"] = head.hash
    sealed["hash"] = record_hash(sealed)
    return sealed, ChainHead(sealed["seq"], sealed["hash"])


def sealed_line(record: dict[str, Any], head: ChainHead) -> tuple[bytes, ChainHead]:
    """`record` attached after `head` as it is stored (no newline), and the new head: the
    same record and hash as `seal`'s, serialised once. The caller's dict is not changed."""
    if CHAIN_FIELDS[0] in record or CHAIN_FIELDS[1] in record or CHAIN_FIELDS[2] in record:
        body = {k: v for k, v in record.items() if k not in CHAIN_FIELDS}
    else:
        body = record.copy()
    seq = head.seq + 1
    body["seq"] = seq
    body["prev_hash"] = head.hash
    encoded = canonical(body)
    digest = hashlib.sha256(head.hash.encode() + encoded).hexdigest()
    return b'%s,"hash":"%s"}' % (encoded[:-1], digest.encode()), ChainHead(seq, digest)


def head_of(record: dict[str, Any]) -> ChainHead:
    """The head a stored record represents; ValueError when it is not a sealed record."""
    seq, digest = record.get("seq"), record.get("hash")
    if not isinstance(seq, int) or isinstance(seq, bool) or not isinstance(digest, str):
        raise ValueError("not a sealed audit record")
    return ChainHead(seq, digest)
