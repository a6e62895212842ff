"""The request's deadline over a whole stream: one timer for the stream, not one per chunk.

The deadline bounds the whole stream, not only its start, but it only ever interrupts a wait
for the upstream, never the client's side of a yield: when it passes while the relay waits
for the next chunk, the wait is cancelled and becomes UpstreamTimeout; when it passes while
the client is being written to, the next wait fails at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TypeVar

from gateway.errors import UpstreamTimeout

T = TypeVar("T")


class StreamDeadline:
    __slots__ = ("_cancelled", "_handle", "_passed", "_task", "_waiting")

    def __init__(self, deadline: float) -> None:
        """`deadline` on `time.monotonic()`'s clock."""
        loop = asyncio.get_running_loop()
        # The task that waits: a stream is relayed by one task, so it is looked up once.
        self._task: asyncio.Task[object] | None = None
        self._waiting = False
        self._passed = False
        self._cancelled = False  # whether this deadline asked for the task's cancellation
        self._handle = loop.call_at(loop.time() + (deadline - time.monotonic()), self._expire)

    def _expire(self) -> None:
        self._passed = True
        if self._waiting and not self._cancelled and self._task is not None:
            self._cancelled = True
            self._task.cancel()

    async def next(self, items: AsyncIterator[T]) -> T | None:
        """The next item, None at the end, or UpstreamTimeout once the deadline has passed."""
        if self._passed:
            raise _passed()
        task = self._task
        if task is None:
            self._task = task = asyncio.current_task()
        self._waiting = True
        try:
            item = await anext(items, None)
        except asyncio.CancelledError:
            if self._cancelled and task is not None:
                self._cancelled = False
                if task.uncancel() == 0:  # nobody else cancelled the task: ours alone
                    raise _passed() from None
            raise
        finally:
            self._waiting = False
        if self._cancelled and task is not None:  # the wait ended anyway: its cancellation was swallowed
            self._cancelled = False
            task.uncancel()
            raise _passed()
        return item

    def close(self) -> None:
        self._handle.cancel()


def _passed() -> UpstreamTimeout:
    return UpstreamTimeout("The request deadline passed before the stream completed.")
