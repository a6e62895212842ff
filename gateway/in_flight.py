"""One call per key at a time: callers that ask for a key while its call is under way await
that call's result (or its exception) instead of starting their own.

The call runs in a task of its own, so a caller that is cancelled (its client gone) does not
cancel it for the others; its exception is retrieved even when every caller has gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class InFlight(Generic[K, T]):
    def __init__(self) -> None:
        self._calls: dict[K, asyncio.Future[T]] = {}

    async def call(self, key: K, start: Callable[[], Coroutine[Any, Any, T]]) -> tuple[T, bool]:
        """The result of `key`'s call, starting it with `start()` when none is under way;
        and whether this caller started it (False: it joined one)."""
        running = self._calls.get(key)
        if running is not None:
            return await asyncio.shield(running), False
        task = asyncio.ensure_future(start())
        self._calls[key] = task
        task.add_done_callback(lambda done: self._done(key, done))
        return await asyncio.shield(task), True

    def _done(self, key: K, done: asyncio.Future[T]) -> None:
        if self._calls.get(key) is done:
            del self._calls[key]
        if not done.cancelled():
            done.exception()  # retrieved here too: every caller may have been cancelled
