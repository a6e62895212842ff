"""The worker's metrics off the request path: snapshots for the other workers, the /metrics
page, and the optional OTLP push. Each is a background task or a thread; none of them is
awaited by a request, and a failed export is counted and logged, never raised."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from opentelemetry.sdk.metrics.export import MetricExporter, MetricsData
from opentelemetry.sdk.resources import Resource

from telemetry.exposition import Snapshot, merge, render
from telemetry.otlp_metrics import export, metrics_data
from telemetry.registry import Labels, MetricSpec, Registry
from telemetry.worker_snapshots import WorkerSnapshots

logger = logging.getLogger("tollgate.telemetry")

_CLOSE_TIMEOUT_S = 5.0  # the last push at shutdown waits at most this long for a collector

# A gauge whose values need an await (a state store read): read when a page or an export is made.
AsyncSource = tuple[MetricSpec, Callable[[], Awaitable[list[tuple[Labels, float]]]]]


class OtlpPush:
    """The OTLP exporter in a daemon thread of its own, fed one batch at a time: a batch that
    comes while the last one is still being sent (a slow or dead collector) is dropped, counted."""

    def __init__(
        self, exporter: MetricExporter, interval_s: float, timeout_s: float, resource: Resource
    ) -> None:
        self.exporter = exporter
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.resource = resource
        self.failed = 0  # batches dropped or refused
        self._pending: MetricsData | None = None
        self._wake = threading.Condition()
        self._busy = False
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="tollgate-metric-export", daemon=True)
        self._thread.start()

    def offer(self, data: MetricsData) -> None:
        with self._wake:
            if self._busy or self._pending is not None:
                self.failed += 1
                return
            self._pending = data
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while self._pending is None and not self._stopping:
                    self._wake.wait()
                data, self._pending = self._pending, None
                if data is None:
                    return
                self._busy = True
            try:
                delivered = export(self.exporter, data, self.timeout_s)
            except Exception:
                logger.exception("metrics export failed")
                delivered = False
            with self._wake:
                self._busy = False
                if not delivered:
                    self.failed += 1
                    logger.warning("metrics export failed", extra={"failed_total": self.failed})
                self._wake.notify_all()

    def close(self, timeout_s: float) -> None:
        """Send what was offered last (waiting at most `timeout_s`), then stop. Blocking."""
        deadline = time.monotonic() + timeout_s
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
            while (self._busy or self._pending is not None) and time.monotonic() < deadline:
                self._wake.wait(max(deadline - time.monotonic(), 0.0))
        self.exporter.shutdown(timeout_millis=max(deadline - time.monotonic(), 0.0) * 1000)


class MetricsService:
    def __init__(
        self,
        registry: Registry,
        *,
        snapshots: WorkerSnapshots | None,
        snapshot_interval_s: float,
        otlp: OtlpPush | None,
        async_sources: list[AsyncSource],
        started_ns: int,
    ) -> None:
        self._registry = registry
        self._snapshots = snapshots
        self._snapshot_interval_s = snapshot_interval_s
        self._otlp = otlp
        self._async_sources = async_sources
        self._started_ns = started_ns
        self._tasks: list[asyncio.Task[None]] = []
        self._snapshot_failed = 0

    @property
    def export_failed(self) -> int:
        """Metric exports that did not go through: OTLP batches, snapshot files."""
        return self._snapshot_failed + (self._otlp.failed if self._otlp is not None else 0)

    @property
    def specs(self) -> list[MetricSpec]:
        return [*self._registry.specs, *(spec for spec, _ in self._async_sources)]

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._snapshots is not None:
            self._tasks.append(loop.create_task(self._snapshot_loop(), name="metrics-snapshots"))
        if self._otlp is not None:
            self._tasks.append(loop.create_task(self._otlp_loop(self._otlp), name="metrics-otlp"))

    async def page(self, accept: str) -> tuple[bytes, str]:
        """The /metrics page: this worker's live figures merged with the others' snapshots."""
        own = await self._snapshot()
        return await asyncio.to_thread(self._render, own, accept)

    def _render(self, own: dict[str, Any], accept: str) -> tuple[bytes, str]:
        others = self._snapshots.read_others() if self._snapshots is not None else []
        specs = self.specs
        return render(specs, merge(specs, [Snapshot(own, True), *others]), accept)

    async def _snapshot(self) -> dict[str, Any]:
        snapshot = self._registry.snapshot()
        for spec, read in self._async_sources:
            try:
                rows = await read()
            except Exception:
                logger.exception("metric source failed", extra={"metric": spec.name})
                continue
            snapshot["metrics"][spec.name] = [[list(k), v] for k, v in rows]
        return snapshot

    async def _snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(self._snapshot_interval_s)
            await self._write_snapshot()

    async def _write_snapshot(self) -> None:
        assert self._snapshots is not None
        data = orjson.dumps(self._registry.snapshot())
        try:
            await asyncio.to_thread(self._snapshots.write, data)
        except OSError:
            self._snapshot_failed += 1
            logger.exception("metrics snapshot not written")

    async def _otlp_loop(self, push: OtlpPush) -> None:
        while True:
            await asyncio.sleep(push.interval_s)
            await self._push(push)

    async def _push(self, push: OtlpPush) -> None:
        push.offer(metrics_data(self.specs, await self._snapshot(), push.resource, self._started_ns))

    async def aclose(self) -> None:
        """Stop the loops, then one last snapshot and push, so a worker's final figures count."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._snapshots is not None:
            await self._write_snapshot()
        if self._otlp is not None:
            await self._push(self._otlp)
            await asyncio.to_thread(self._otlp.close, _CLOSE_TIMEOUT_S)
