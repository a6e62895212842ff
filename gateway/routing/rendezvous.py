"""Rendezvous (highest-random-weight) hashing, and the bound that makes it spill.

Every replica gets a weight for a key; the key goes to the heaviest. Every gateway process
computes the same weights from the same key and the same replica addresses, so they all
agree without sharing any state. Removing a replica moves only the keys it held (each to
its own second choice), and adding one takes about 1/N of the keys, all to the new one.

The weight is a 64-bit mix of the key's hash and the replica's: one hash of the key per
request, then a few integer operations per replica.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

_MASK = (1 << 64) - 1


def stable_hash(text: str) -> int:
    """A 64-bit hash that is the same in every process (unlike `hash()`, which is salted)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def weight(key_hash: int, replica_hash: int) -> int:
    """The key's weight on a replica: splitmix64's finaliser over the two hashes combined."""
    z = key_hash ^ replica_hash
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def ranked(key_hash: int, replica_hashes: Sequence[int]) -> list[int]:
    """Replica indexes for a key, most preferred first."""
    weights = [weight(key_hash, h) for h in replica_hashes]
    return sorted(range(len(weights)), key=weights.__getitem__, reverse=True)


def load_bound(in_flight_total: int, replicas: int, factor: float, floor: int) -> int:
    """The most requests one replica may have in flight before a new one spills past it.

    `factor` times the average the new request would make (consistent hashing with bounded
    loads, Mirrokni et al. 2016); with factor > 1 some replica is always under it. `floor`
    keeps light load from spilling at all: a server batching dozens of requests is not
    overloaded by its second one, and a spill costs the session its cache.
    """
    return max(floor, math.ceil(factor * (in_flight_total + 1) / replicas))
