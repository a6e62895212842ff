"""/metrics: every worker's snapshot merged into one Prometheus (or OpenMetrics) page.

Names follow the OpenTelemetry-to-Prometheus translation the collector applies (dots become
underscores, the unit is appended as a suffix: `s` -> `_seconds`, `{...}` annotations are
dropped; counters end in `_total`), so a dashboard query reads the same whether Prometheus
scrapes the gateway or a collector that received the gateway's OTLP metrics.

Merging: counters and histograms are summed over every snapshot, those of exited workers
included (their totals stay counted, as in prometheus-client's multiprocess mode); gauges take
the largest value among live workers. A histogram bucket's exemplar is the latest of any worker.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar

from telemetry.registry import Kind, MetricSpec

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_UNIT_SUFFIXES = {"s": "seconds", "ms": "milliseconds", "By": "bytes"}

Series = dict[tuple[str, ...], Any]


@dataclass(frozen=True, slots=True)
class Snapshot:
    data: dict[str, Any]  # Registry.snapshot()
    alive: bool  # the worker that wrote it is running


def prometheus_name(spec: MetricSpec) -> str:
    """The metric's Prometheus name, without the `_total` a counter's samples carry."""
    base = _INVALID.sub("_", spec.name)
    unit = "" if spec.unit.startswith("{") else _UNIT_SUFFIXES.get(spec.unit, spec.unit)
    unit = _INVALID.sub("_", unit)
    return base if not unit or base.endswith("_" + unit) else f"{base}_{unit}"


def label_name(attribute: str) -> str:
    return _INVALID.sub("_", attribute)


def merge(specs: Sequence[MetricSpec], snapshots: Iterable[Snapshot]) -> dict[str, Series]:
    merged: dict[str, Series] = {spec.name: {} for spec in specs}
    kinds = {spec.name: spec.kind for spec in specs}
    for snapshot in snapshots:
        for name, rows in snapshot.data.get("metrics", {}).items():
            kind = kinds.get(name)
            if kind is None or (kind is Kind.GAUGE and not snapshot.alive):
                continue
            into = merged[name]
            for labels, value in rows:
                key = tuple(labels)
                if kind is Kind.HISTOGRAM:
                    _add_histogram(into, key, value)
                elif kind is Kind.GAUGE:
                    into[key] = max(into.get(key, -math.inf), value)
                else:
                    into[key] = into.get(key, 0.0) + value
    return merged


def _add_histogram(into: Series, key: tuple[str, ...], value: list[Any]) -> None:
    counts, total, exemplars, low, high = value
    found = into.get(key)
    if found is None:
        into[key] = [list(counts), total, list(exemplars), low, high]
        return
    found[0] = [a + b for a, b in zip(found[0], counts, strict=True)]
    found[1] += total
    found[2] = [
        b if b is not None and (a is None or b[2] > a[2]) else a
        for a, b in zip(found[2], exemplars, strict=True)
    ]
    found[3] = min(found[3], low)
    found[4] = max(found[4], high)


class _Page(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def render(specs: Sequence[MetricSpec], merged: dict[str, Series], accept: str) -> tuple[bytes, str]:
    """The page in the format the scraper asked for; exemplars only in OpenMetrics."""
    families = [_family(spec, merged.get(spec.name, {})) for spec in specs]
    encoder, content_type = choose_encoder(accept)
    return encoder(_Page(families)), content_type


def _family(spec: MetricSpec, series: Series) -> Metric:
    name = prometheus_name(spec)
    labels = [label_name(a) for a in spec.labels]
    family: CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily
    if spec.kind is Kind.COUNTER:
        family = CounterMetricFamily(name, spec.description, labels=labels)
        for key, value in series.items():
            family.add_metric(list(key), value)
    elif spec.kind is Kind.GAUGE:
        family = GaugeMetricFamily(name, spec.description, labels=labels)
        for key, value in series.items():
            family.add_metric(list(key), value)
    else:
        family = HistogramMetricFamily(name, spec.description, labels=labels)
        bounds = [*(_bound(b) for b in spec.buckets), "+Inf"]
        for key, (counts, total, exemplars, _low, _high) in series.items():
            buckets: list[Any] = []
            cumulative = 0
            for bound, count, exemplar in zip(bounds, counts, exemplars, strict=True):
                cumulative += count
                if exemplar is None:
                    buckets.append((bound, cumulative))
                else:
                    trace_id, value, at = exemplar
                    buckets.append((bound, cumulative, Exemplar({"trace_id": trace_id}, value, at)))
            family.add_metric(list(key), buckets, total)
    return family


def _bound(value: float) -> str:
    return repr(float(value))
