"""Settlements the store could not take, tried again in one background loop.

A settle is idempotent, so trying it again is always safe. The settlements wait in one
table keyed by reservation id and are sent together each round (the Redis wire pipelines
them, the SQLite store runs them in one transaction), so a store that stays away for
minutes costs one task and a small record per request, not a task each. Each is given up
after `give_up_s`; an open reservation is then released by its lease.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from gateway.errors import StateStoreUnavailable
from gateway.metering.records import Settlement
from gateway.ports import StateStore

logger = logging.getLogger("tollgate.metering")

FIRST_RETRY_S = 0.2
MAX_RETRY_S = 5.0
_ROUND = 1000  # settlements sent per round, at most


@dataclass(frozen=True, slots=True)
class _Waiting:
    settlement: Settlement
    request_id: str
    give_up_at: float  # loop time


class SettleRetries:
    def __init__(self, store: StateStore, give_up_s: float) -> None:
        self._store = store
        self._give_up_s = give_up_s
        self._waiting: dict[str, _Waiting] = {}
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, settlement: Settlement, request_id: str) -> None:
        loop = asyncio.get_running_loop()
        self._waiting[settlement.reservation_id] = _Waiting(
            settlement, request_id, loop.time() + self._give_up_s
        )
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        wait = FIRST_RETRY_S
        while self._waiting:
            await asyncio.sleep(wait)
            self._give_up_expired(loop.time())
            failed = await self._send(list(self._waiting.values())[:_ROUND])
            wait = min(wait * 2, MAX_RETRY_S) if failed else FIRST_RETRY_S

    def _give_up_expired(self, now: float) -> None:
        for reservation_id, waiting in list(self._waiting.items()):
            if waiting.give_up_at <= now:
                del self._waiting[reservation_id]
                logger.error(
                    "settle abandoned: the state store stayed unavailable; an open reservation "
                    "is released by its lease",
                    extra={"request_id": waiting.request_id},
                )

    async def _send(self, batch: list[_Waiting]) -> bool:
        """Send these once; True when the store was unavailable for any of them (kept)."""
        results = await asyncio.gather(
            *(self._store.settle(w.settlement) for w in batch), return_exceptions=True
        )
        failed = False
        for waiting, result in zip(batch, results, strict=True):
            if isinstance(result, StateStoreUnavailable):
                failed = True
                continue
            if isinstance(result, asyncio.CancelledError):
                raise result
            self._waiting.pop(waiting.settlement.reservation_id, None)
            if isinstance(result, BaseException):
                logger.error("settle failed", exc_info=result, extra={"request_id": waiting.request_id})
            else:
                logger.info("settled after a retry", extra={"request_id": waiting.request_id})
        return failed

    async def aclose(self) -> None:
        """Stop retrying, giving each waiting settlement one last try."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        waiting = list(self._waiting.values())
        if waiting and await self._send(waiting):
            logger.error(
                "settle abandoned at shutdown: the state store is unavailable",
                extra={"settlements": len(self._waiting)},
            )
        self._waiting.clear()
