"""OTLP metrics (optional): each worker pushes its cumulative figures through the SDK's exporter.

A worker's snapshot becomes the SDK's `MetricsData` (cumulative temporality, start time = the
worker's start); each worker is its own `service.instance.id`, so the collector keeps their
series apart and a query sums them, as it does for any multi-process service.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from telemetry import names as n
from telemetry.registry import Kind, MetricSpec

_CUMULATIVE = AggregationTemporality.CUMULATIVE


def metrics_data(
    specs: Sequence[MetricSpec], snapshot: dict[str, Any], resource: Resource, started_ns: int
) -> MetricsData:
    now = int(snapshot["time"] * 1e9)
    rows = snapshot["metrics"]
    metrics = []
    for spec in specs:
        series = rows.get(spec.name)
        if not series:
            continue
        metrics.append(Metric(spec.name, spec.description, spec.unit, _data(spec, series, started_ns, now)))
    scope = ScopeMetrics(InstrumentationScope(n.SCOPE, schema_url=n.SCHEMA_URL), metrics, n.SCHEMA_URL)
    return MetricsData([ResourceMetrics(resource, [scope], n.SCHEMA_URL)])


def _data(spec: MetricSpec, series: list[Any], start: int, now: int) -> Sum | Gauge | Histogram:
    if spec.kind is Kind.HISTOGRAM:
        return Histogram(
            [
                HistogramDataPoint(
                    _attributes(spec, labels),
                    start,
                    now,
                    sum(counts),
                    total,
                    counts,
                    spec.buckets,
                    low,
                    high,
                )
                for labels, (counts, total, _exemplars, low, high) in series
            ],
            _CUMULATIVE,
        )
    points = [NumberDataPoint(_attributes(spec, labels), start, now, value) for labels, value in series]
    if spec.kind is Kind.GAUGE:
        return Gauge(points)
    return Sum(points, _CUMULATIVE, is_monotonic=True)


def export(exporter: MetricExporter, data: MetricsData, timeout_s: float) -> bool:
    """Blocking: call in a thread. True when the receiver took the batch."""
    result = exporter.export(data, timeout_millis=timeout_s * 1000)
    return result is MetricExportResult.SUCCESS


def _attributes(spec: MetricSpec, labels: list[str]) -> dict[str, str]:
    """An empty value means "not set" (error.type on success): OTLP leaves the attribute out."""
    return {name: value for name, value in zip(spec.labels, labels, strict=True) if value}
