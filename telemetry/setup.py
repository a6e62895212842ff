"""Telemetry from config, for the composition root: the tracer (the core's `Tracer` port), the
metrics finisher, the /metrics page, and their shutdown.

Built inside each worker's lifespan, after the fork, so that the export threads and tasks
belong to the worker; nothing here is global (no `set_tracer_provider`, no global meter):
the span recorder and the metrics registry are held by the `Telemetry` object.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.resources import Resource

from gateway.audit.queued_sink import QueuedSink
from gateway.config import GatewayConfig
from gateway.metering.prices import PriceBook
from gateway.ports import AuditSink, EvaluationQueue, StateStore, Upstream
from gateway.routing.arms import ArmRecord
from gateway.routing.upstream_route import UpstreamRoute
from gateway.tracing import NO_TRACER, Tracer
from telemetry import instruments as spec
from telemetry import names as n
from telemetry.arms import ArmMetrics
from telemetry.exporters import metric_exporter, span_exporter
from telemetry.jobs import JobsSource, measure_jobs
from telemetry.labels import PromptFamilyNames, WorkflowLabels
from telemetry.metrics_service import AsyncSource, MetricsService, OtlpPush
from telemetry.recorder import MetricsRecorder
from telemetry.registry import Registry
from telemetry.request_trace import SpanRecorder
from telemetry.sources import BudgetReader, circuit_states, drop_counts, policy_queue_states
from telemetry.span_export import Framing
from telemetry.span_queue import SpanQueue
from telemetry.worker_snapshots import WorkerSnapshots


@dataclass(frozen=True, slots=True)
class Telemetry:
    tracer: Tracer
    finishers: tuple[MetricsRecorder, ...]  # the metrics recorder, unless metrics go nowhere
    metrics: MetricsService
    spans: SpanQueue | None  # None when tracing is off
    arms: Callable[[ArmRecord], None] | None = None  # side-by-side arm metrics, when metrics are recorded

    async def aclose(self) -> None:
        """Flush and stop: the last spans and figures are exported, within a bounded time."""
        await self.metrics.aclose()
        if self.spans is not None:
            await asyncio.to_thread(self.spans.shutdown)


def build_telemetry(
    config: GatewayConfig,
    *,
    upstreams: Mapping[str, Upstream],
    routes: Mapping[str, UpstreamRoute],
    scrub: Callable[[str], str],
    store: StateStore | None = None,
    audit: AuditSink | None = None,
    metrics_dir: Path | None = None,
    policy_queue: EvaluationQueue | None = None,
    jobs: JobsSource | None = None,
    live_keys_age: Callable[[], float] | None = None,
    config_edits: Callable[[], Mapping[str, int]] | None = None,
) -> Telemetry:
    settings = config.telemetry
    resource = _resource(config)
    # With routing.workflows the workflow is the one the ledger and the policy see (exchange.workflow).
    workflows = WorkflowLabels(settings.labels, scrub, from_exchange=bool(config.routing.workflows))
    registry = Registry()
    recorder = MetricsRecorder(
        spec.Instruments(registry),
        workflows,
        upstreams,
        PriceBook.from_config(config.prices),
        settings.labels.prompt_family_buckets,
        frozenset(config.models),
        PromptFamilyNames(config.routing.prompt_families),
    )
    tracer: Tracer = NO_TRACER
    spans: SpanQueue | None = None
    framing = Framing(dict(resource.attributes), n.SCOPE, _version(), n.SCHEMA_URL)
    exporter = span_exporter(settings.traces, framing)
    if exporter is not None:
        traces = settings.traces
        spans = SpanQueue(
            exporter,
            max_spans=traces.queue_size,
            batch_spans=traces.batch_size,
            interval_s=traces.export_interval_s,
        )
        tracer = SpanRecorder(
            spans,
            sampling_ratio=traces.sampling_ratio,
            stage_spans=traces.stage_spans,
            workflows=workflows,
            scrub=scrub,
        )
    async_sources: list[AsyncSource] = []
    if store is not None:
        budgets = BudgetReader(config, store)
        if budgets.limits:
            limits = budgets.limits
            registry.observed(spec.BUDGET_LIMIT, lambda: limits)
            async_sources.append((spec.BUDGET_USED, budgets.used))
    registry.observed(spec.CIRCUIT_STATE, circuit_states(routes))
    if jobs is not None:
        async_sources.extend(measure_jobs(registry, jobs))
    if live_keys_age is not None:
        read_age = live_keys_age
        registry.observed(spec.LIVE_KEYS_AGE, lambda: [((), read_age())])
    if config_edits is not None:
        read_edits = config_edits
        registry.observed(
            spec.CONFIG_EDITS, lambda: [((outcome,), float(n)) for outcome, n in read_edits().items()]
        )
    if policy_queue is not None:
        _measure_policy_queue(registry, policy_queue)
    otlp = settings.metrics.otlp
    metrics = MetricsService(
        registry,
        snapshots=WorkerSnapshots(metrics_dir) if metrics_dir is not None else None,
        snapshot_interval_s=settings.metrics.snapshot_interval_s,
        otlp=OtlpPush(metric_exporter(otlp), otlp.interval_s, otlp.timeout_s, resource) if otlp else None,
        async_sources=async_sources,
        started_ns=time.time_ns(),
    )
    drops: dict[str, Callable[[], int]] = {"metrics": lambda: metrics.export_failed}
    if spans is not None:
        queue = spans
        drops["spans"] = lambda: queue.dropped
    if isinstance(audit, QueuedSink):
        sink = audit
        drops["audit"] = lambda: sink.dropped + sink.failed
    registry.observed(spec.TELEMETRY_DROPPED, drop_counts(drops))
    recording = settings.metrics.prometheus or otlp is not None
    arms = ArmMetrics(registry).record if recording else None
    return Telemetry(tracer, (recorder,) if recording else (), metrics, spans, arms)


def _measure_policy_queue(registry: Registry, queue: EvaluationQueue) -> None:
    labels = ("rego",)
    waits = registry.histogram(spec.POLICY_QUEUE_WAIT)
    queue.observe_waits(lambda seconds: waits.observe(labels, seconds))
    registry.observed(spec.POLICY_QUEUE, policy_queue_states(queue, labels))
    registry.observed(spec.POLICY_QUEUE_REFUSED, lambda: [(labels, float(queue.stats().refused))])


def _resource(config: GatewayConfig) -> Resource:
    settings = config.telemetry
    attributes: dict[str, str] = {
        n.SERVICE_NAME: settings.service_name,
        n.SERVICE_VERSION: _version(),
        # One per worker process: OTLP receivers keep each worker's cumulative series apart.
        n.SERVICE_INSTANCE_ID: f"{socket.gethostname()}-{os.getpid()}",
    }
    attributes.update(settings.resource_attributes)
    return Resource(attributes, schema_url=n.SCHEMA_URL)


def _version() -> str:
    try:
        return importlib.metadata.version("tollgate")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
