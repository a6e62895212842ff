"""The synchronous model calls in flight in every gateway process of one host, for the pull gate.

A `tollgate jobs-worker` serves no HTTP: left to itself, its pull gate would see no
synchronous load at all and pull at full speed while the gateways beside it serve interactive
requests. So each gateway process publishes its count of synchronous calls in flight in a
small shared file (`jobs.host_load_file`), one slot per process, and every process's pull
gate reads the sum: a worker claims nothing, and a running job takes no further step, while
any gateway of the host has an interactive request in flight. A process's pull gate also
publishes its pause after an upstream throttled (a 429 or 3040 seen by a synchronous call or a
job), so that every process of the host pauses pulling, not only the one that saw it.

A slot is owned by the process holding a POSIX record lock on it; the kernel drops the lock
when the process ends, however it ends, so a reader counts only slots whose lock is held (a
killed gateway's last count is ignored), and a new process takes over a slot whose lock is
free. A count is one aligned 8-byte word, written by its owner alone. The file holds process
ids, counts and pause ends only. POSIX locks belong to the process, not the file object: a process opens
the file once (the composition root builds one `HostLoad`).
"""

from __future__ import annotations

import asyncio
import fcntl
import mmap
import os
import time
from collections.abc import Callable

from gateway.jobs.pull_gate import NoLoad, SyncLoad

SLOTS = 256
# the owner's pid, its synchronous calls in flight, when its throttle pause ends (wall clock, µs)
_WORDS_PER_SLOT = 3
_PID, _IN_FLIGHT, _PAUSED_UNTIL = range(_WORDS_PER_SLOT)
_SLOT_BYTES = 8 * _WORDS_PER_SLOT
FILE_BYTES = SLOTS * _SLOT_BYTES


class HostLoadFull(RuntimeError):
    pass


class HostLoad:
    """This process's synchronous load (`local`) plus the other gateway processes' of the host.

    `attach(..., publish=True)` gives this process a slot and keeps it current as `local`
    changes (a jobs worker's stays at 0); with `publish=False` the process only reads.
    """

    def __init__(self, path: str, poll_s: float = 0.001) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(self._fd).st_size < FILE_BYTES:
                os.ftruncate(self._fd, FILE_BYTES)
            self._map = mmap.mmap(self._fd, FILE_BYTES)
        except BaseException:
            os.close(self._fd)
            raise
        self._words = memoryview(self._map).cast("q")
        self._poll_s = poll_s
        self._slot: int | None = None
        self._local: SyncLoad = NoLoad()
        self._others = 0
        self._paused_until = 0.0
        self._others_read_at = -1.0

    def attach(self, local: SyncLoad, publish: bool) -> None:
        self._local = local
        if publish:
            self._slot = self._claim_slot()
            local.watch(self._published)

    @property
    def in_flight(self) -> int:
        return self._local.in_flight + self.others()

    async def idle(self) -> None:
        """Return once no synchronous call is in flight here nor in another gateway process."""
        while True:
            if self._local.in_flight:
                await self._local.idle()
            elif self.others():
                await asyncio.sleep(self._poll_s)  # another process's calls: no event to wait on
            else:
                return

    def watch(self, listener: Callable[[int], None]) -> None:
        self._local.watch(listener)

    def others(self) -> int:
        """The other live processes' synchronous calls in flight."""
        self._read_others()
        return self._others

    def throttled(self, until: float) -> None:
        """This process paused pulling until `until` (`time.time()`): the others pause too."""
        if self._slot is not None and not self._map.closed:
            self._words[self._slot * _WORDS_PER_SLOT + _PAUSED_UNTIL] = int(until * 1e6)

    def throttled_until(self) -> float:
        """When the latest pause another live process published ends (`time.time()`; 0: none)."""
        self._read_others()
        return self._paused_until

    def _read_others(self) -> None:
        """Read at most every `poll_s`: a pull loop and its jobs ask thousands of times a second."""
        now = time.monotonic()
        if now - self._others_read_at < self._poll_s:
            return
        self._others_read_at = now
        words = self._words
        counts = words[_IN_FLIGHT::_WORDS_PER_SLOT].tolist()
        pauses = words[_PAUSED_UNTIL::_WORDS_PER_SLOT].tolist()
        wall_us = int(time.time() * 1e6)
        if not any(counts) and max(pauses) <= wall_us:  # the usual case, without a Python loop
            self._others, self._paused_until = 0, 0.0
            return
        busy = [
            slot
            for slot in range(SLOTS)
            if (counts[slot] > 0 or pauses[slot] > wall_us) and slot != self._slot
        ]
        live = [slot for slot in busy if self._held(slot)] if busy else []
        self._others = sum(counts[slot] for slot in live if counts[slot] > 0)
        self._paused_until = max((pauses[slot] for slot in live), default=0) / 1e6

    def close(self) -> None:
        if self._map.closed:
            return
        if self._slot is not None:
            for word in range(_WORDS_PER_SLOT):
                self._words[self._slot * _WORDS_PER_SLOT + word] = 0
        self._words.release()
        self._map.close()
        os.close(self._fd)  # drops this process's slot lock

    def _published(self, in_flight: int) -> None:
        if self._slot is not None and not self._map.closed:
            self._words[self._slot * _WORDS_PER_SLOT + _IN_FLIGHT] = in_flight

    def _claim_slot(self) -> int:
        for slot in range(SLOTS):
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, _SLOT_BYTES, slot * _SLOT_BYTES)
            except OSError:
                continue  # another live process owns it
            self._words[slot * _WORDS_PER_SLOT + _IN_FLIGHT] = 0
            self._words[slot * _WORDS_PER_SLOT + _PAUSED_UNTIL] = 0
            self._words[slot * _WORDS_PER_SLOT + _PID] = os.getpid()
            return slot
        raise HostLoadFull(f"all {SLOTS} slots of the host load file are held by live processes")

    def _held(self, slot: int) -> bool:
        """Whether a live process owns `slot` (testing takes the lock if free: given back at once)."""
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, _SLOT_BYTES, slot * _SLOT_BYTES)
        except OSError:
            return True
        fcntl.lockf(self._fd, fcntl.LOCK_UN, _SLOT_BYTES, slot * _SLOT_BYTES)
        return False
