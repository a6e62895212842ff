"""One call per key at a time: callers that ask for a key while its call is under way await
that call's result (or its exception) instead of starting their own.

Two ways to run the call, chosen per instance:

- detached (the default): the call runs in a task of its own, so a caller that is cancelled
  (its client gone) does not cancel it for the others; its exception is retrieved even when
  every caller has gone. For calls too dear to make twice (a policy evaluation).
- `detached=False`: the first caller makes the call itself, with no task; the others wait
  for its outcome. Should the first caller be cancelled, the call goes with it and the
  waiting callers start over (one of them makes the call again). For cheap calls made on
  nearly every request (a session record's read), where a task and its shield cost more
  than the call's own Python.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

# What a waiting caller is given: (the result, None), (None, the call's exception), or
# _AGAIN when the call went with the caller that made it. Any, not a tuple type: compiled
# (setup.py), an annotation is checked at run time, and _AGAIN is no tuple.
_Outcome = Any
_AGAIN = object()


class InFlight(Generic[K, T]):
    def __init__(self, detached: bool = True) -> None:
        self._detached = detached
        self._calls: dict[K, asyncio.Future[T]] = {}
        self._waiting: dict[K, list[asyncio.Future[_Outcome]]] = {}

    async def call(self, key: K, start: Callable[[], Coroutine[Any, Any, T]]) -> tuple[T, bool]:
        """The result of `key`'s call, starting it with `start()` when none is under way;
        and whether this caller started it (False: it joined one)."""
        if not self._detached:
            return await self._inline(key, start)
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

    async def _inline(self, key: K, start: Callable[[], Coroutine[Any, Any, T]]) -> tuple[T, bool]:
        while (waiters := self._waiting.get(key)) is not None:
            waiter: asyncio.Future[_Outcome] = asyncio.get_running_loop().create_future()
            waiters.append(waiter)
            outcome = await waiter  # a cancelled caller cancels only its own waiter
            if outcome is not _AGAIN:
                result, error = outcome
                if error is not None:
                    raise error
                return result, False
        self._waiting[key] = waiters = []
        try:
            result = await start()
        except asyncio.CancelledError:
            self._settle(key, waiters, _AGAIN)  # the call went with its caller: the others start over
            raise
        except BaseException as exc:
            self._settle(key, waiters, (None, exc))
            raise
        self._settle(key, waiters, (result, None))
        return result, True

    def _settle(self, key: K, waiters: list[asyncio.Future[_Outcome]], outcome: _Outcome) -> None:
        del self._waiting[key]
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(outcome)
