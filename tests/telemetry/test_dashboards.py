"""The dashboards parse, point at the provisioned data sources, and read only metrics the
gateway exports (the real Prometheus test runs each query: test_prometheus.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from telemetry import instruments, jobs
from telemetry.exposition import prometheus_name
from telemetry.registry import Kind, MetricSpec
from tests.telemetry.dashboards import DASHBOARDS, dashboards, metric_names, panels, prometheus_queries

PROVISIONING = DASHBOARDS.parent / "provisioning"


def _exported() -> set[str]:
    names = set()
    for spec in [*vars(instruments).values(), *vars(jobs).values()]:
        if isinstance(spec, MetricSpec):
            base = prometheus_name(spec)
            if spec.kind is Kind.COUNTER:
                names.add(base + "_total")
            elif spec.kind is Kind.HISTOGRAM:
                names |= {base + "_bucket", base + "_sum", base + "_count"}
            else:
                names.add(base)
    return names


def test_every_query_reads_only_exported_metrics() -> None:
    exported = _exported()
    queries = prometheus_queries()
    assert len(queries) > 20
    for dashboard, title, expr in queries:
        read = metric_names(expr)
        assert read, (dashboard, title)
        assert read <= exported, (dashboard, title, read - exported)


def test_dashboards_use_the_provisioned_data_sources_and_unique_ids() -> None:
    provisioned = yaml.safe_load((PROVISIONING / "datasources" / "tollgate.yaml").read_text())
    uids = {source["uid"]: source["type"] for source in provisioned["datasources"]}
    assert uids == {"prometheus": "prometheus", "tempo": "tempo"}
    seen_uids = set()
    for name, dashboard in dashboards():
        assert dashboard["uid"] not in seen_uids, name
        seen_uids.add(dashboard["uid"])
        ids = [panel["id"] for panel in panels(dashboard)]
        assert len(ids) == len(set(ids)), name
        for panel in panels(dashboard):
            source = panel.get("datasource")
            if source is not None:
                assert uids[source["uid"]] == source["type"], (name, panel["title"])


def test_latency_panels_link_to_traces() -> None:
    exemplars = [
        target
        for _, dashboard in dashboards()
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
        if target.get("exemplar")
    ]
    assert exemplars
    assert all("_seconds_bucket" in target["expr"] for target in exemplars)
    provisioned = yaml.safe_load((PROVISIONING / "datasources" / "tollgate.yaml").read_text())
    prometheus = next(s for s in provisioned["datasources"] if s["type"] == "prometheus")
    assert prometheus["jsonData"]["exemplarTraceIdDestinations"] == [
        {"name": "trace_id", "datasourceUid": "tempo"}
    ]


def test_the_request_lookup_searches_tempo_by_request_id() -> None:
    lookup = dict(dashboards())["tollgate-request.json"]
    queries = [t["query"] for p in panels(lookup) for t in p.get("targets", [])]
    assert '{ span.tollgate.request_id = "$request_id" }' in queries


def test_the_provisioning_points_at_the_dashboards_directory() -> None:
    provider = yaml.safe_load((PROVISIONING / "dashboards" / "tollgate.yaml").read_text())["providers"][0]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    compose = yaml.safe_load((Path(DASHBOARDS).parents[2] / "compose.yaml").read_text())
    grafana = compose["services"]["grafana"]["volumes"]
    assert "./telemetry/grafana/dashboards:/var/lib/grafana/dashboards:ro" in grafana
