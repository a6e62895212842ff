"""Active health checks: every replica of a pool is probed in the background, and the answers
feed its circuit breaker (enough failing probes in a row open it, unless the replica is busy
serving requests; a healthy one lets an open one try again)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.ports import Health, Upstream
from gateway.routing.pool import ReplicaPool

logger = logging.getLogger("tollgate.routing")


@dataclass(frozen=True, slots=True)
class ProbeTarget:
    upstream: Upstream
    pool: ReplicaPool
    interval_s: float
    timeout_s: float = 5.0  # the time each probe is allowed


class HealthProber:
    """One background task per probed upstream; built and started in the app's lifespan,
    stopped by `aclose` when the app shuts down."""

    def __init__(self, targets: Sequence[ProbeTarget]) -> None:
        self._targets = [t for t in targets if t.interval_s > 0]
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._run(target), name=f"probe:{target.upstream.name}")
            for target in self._targets
        ]

    async def probe(self, target: ProbeTarget) -> None:
        """Probe every replica of one upstream once, concurrently."""
        replicas = range(len(target.pool.addresses))
        results = await asyncio.gather(
            *(target.upstream.check_health(i, target.timeout_s) for i in replicas), return_exceptions=True
        )
        for replica, result in zip(replicas, results, strict=True):
            health = result if isinstance(result, Health) else Health.DOWN
            if isinstance(result, BaseException):
                logger.warning(
                    "health probe failed",
                    extra={"upstream": target.upstream.name, "replica": replica, "error": repr(result)},
                )
            target.pool.probed(replica, health)

    async def _run(self, target: ProbeTarget) -> None:
        while True:
            await self.probe(target)
            await asyncio.sleep(target.interval_s)

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
