"""Random hex ids from the operating system's CSPRNG, read a page at a time.

Every request mints a few ids (its own, its decision's, its meter ticket's, a door's
response or message id), and `os.urandom` is a system call for each: a few hundred
nanoseconds when warm, more among a request's other work. `random_hex(n)` hands out ids of
`n` random bytes cut from one 4 KiB read (each byte used once), from a deque whose `popleft`
is atomic, so threads never share an id. A forked child empties the pools: it never hands
out the bytes its parent read.
"""

from __future__ import annotations

import os
from collections import deque

_READ_BYTES = 4096
_POOLS: dict[int, deque[str]] = {}


def random_hex(nbytes: int) -> str:
    """`nbytes` random bytes, as 2 * `nbytes` lowercase hex digits."""
    pool = _POOLS.get(nbytes)
    if pool is not None:
        try:
            return pool.popleft()
        except IndexError:  # used up (by this thread or another): read again
            pass
    return _refill(nbytes)


def _refill(nbytes: int) -> str:
    pool = _POOLS.setdefault(nbytes, deque())
    digits = os.urandom(_READ_BYTES - _READ_BYTES % nbytes).hex()
    width = 2 * nbytes
    pool.extend(digits[start : start + width] for start in range(width, len(digits), width))
    return digits[:width]


def _forget() -> None:
    _POOLS.clear()


os.register_at_fork(after_in_child=_forget)
