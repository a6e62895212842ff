"""Async jobs' metrics: queue depth and age per tenant (from the shared job store, so every
worker reports the same figures), time from submission to result, and retries by cause."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from gateway.jobs.counters import JobCounters
from gateway.jobs.records import QueueDepth
from telemetry import names as n
from telemetry.metrics_service import AsyncSource
from telemetry.registry import Kind, Labels, MetricSpec, Registry

COMPLETION_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 14_400, 86_400)

QUEUE_DEPTH = MetricSpec(
    "tollgate.jobs.queue.depth",
    Kind.GAUGE,
    "{job}",
    "Async jobs not finished, by tenant: queued (waiting, or waiting out a backoff) or running.",
    (n.TENANT, "tollgate.state"),
)
QUEUE_AGE = MetricSpec(
    "tollgate.jobs.queue.oldest_age",
    Kind.GAUGE,
    "s",
    "Age of each tenant's oldest unfinished async job.",
    (n.TENANT,),
)
COMPLETION = MetricSpec(
    "tollgate.jobs.time_to_completion",
    Kind.HISTOGRAM,
    "s",
    "From an async job's submission to its result (succeeded, failed or expired).",
    (),
    COMPLETION_BUCKETS,
)
FINISHED = MetricSpec(
    "tollgate.jobs.finished",
    Kind.COUNTER,
    "{job}",
    "Async jobs finished by this gateway, by final state.",
    ("tollgate.state",),
)
RETRIES = MetricSpec(
    "tollgate.jobs.retries",
    Kind.COUNTER,
    "{retry}",
    "Async job attempts sent back to the queue, by cause (the upstream's error code, or upstream_pending).",
    ("tollgate.cause",),
)

JobsSource = tuple[Callable[[], Awaitable[list[QueueDepth]]], JobCounters]


def measure_jobs(registry: Registry, source: JobsSource) -> list[AsyncSource]:
    """Registers the counters' metrics; the async sources (queue depth and age) to read at snapshot time."""
    depth, counters = source
    completion = registry.histogram(COMPLETION)
    counters.observe_completion(lambda seconds: completion.observe((), seconds))
    registry.observed(
        FINISHED, lambda: [((state,), float(count)) for state, count in counters.completed.items()]
    )
    registry.observed(
        RETRIES, lambda: [((cause,), float(count)) for cause, count in counters.retries.items()]
    )

    async def depths() -> list[tuple[Labels, float]]:
        return [
            point
            for d in await depth()
            for point in (((d.tenant, "queued"), float(d.queued)), ((d.tenant, "running"), float(d.running)))
        ]

    async def ages() -> list[tuple[Labels, float]]:
        now = time.time()
        return [
            ((d.tenant,), max(0.0, now - d.oldest_created_at))
            for d in await depth()
            if d.oldest_created_at is not None
        ]

    return [(QUEUE_DEPTH, depths), (QUEUE_AGE, ages)]
