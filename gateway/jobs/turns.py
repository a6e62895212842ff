"""Job steps paced over the passes of the event loop, so a burst of job work never stands in
front of an interactive request.

Jobs come in cohorts: a claim starts up to `claim_batch` of them at once, and the job store's
group commit answers many at once. Left alone, a cohort's steps all become ready in the same
pass of the event loop, and the loop runs every ready callback before it looks at its sockets
again: an interactive request arriving then waits for the whole cohort (measured with
`python -m bench.jobs --probe-loop`: the gateway's /healthz took about 1 ms longer during a
drain, its upstream no longer). With `LoopTurns`, at most about `per_pass` job steps start
in one pass; the others wait for the next passes, and between two passes the loop reads its
sockets, so a new request waits for a few job steps at most, not for a cohort.
"""

from __future__ import annotations

import asyncio
from collections import deque


class LoopTurns:
    def __init__(self, per_pass: int) -> None:
        self._per_pass = per_pass
        self._left = per_pass  # turns left in this pass
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._armed = False  # a new pass's turns are scheduled

    async def take(self) -> None:
        """Return within this pass if a turn is left and nobody waits, else in a later pass."""
        loop = asyncio.get_running_loop()
        if self._left > 0 and not self._waiting:
            self._left -= 1
            self._arm(loop)
            return
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiting.append(waiter)
        self._arm(loop)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._give()  # it was given a turn it will not use: pass it on
            raise

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._armed:
            self._armed = True
            loop.call_soon(self._new_pass, loop)

    def _new_pass(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called once per pass while steps wait: this pass's turns, to the first waiters."""
        self._armed = False
        self._left = self._per_pass
        while self._left > 0 and self._give():
            self._left -= 1
        if self._waiting or self._left < self._per_pass:
            self._arm(loop)

    def _give(self) -> bool:
        """The first waiter still waiting gets a turn (False: none was)."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return True
        return False
