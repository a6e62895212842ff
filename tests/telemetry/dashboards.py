"""The dashboards' queries, read from their JSON, ready to send to a real Prometheus."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DASHBOARDS = Path(__file__).resolve().parents[2] / "telemetry" / "grafana" / "dashboards"

# Grafana's variables, as a test run fills them in: every value, and windows that span a
# few of the test Prometheus' 1 s scrapes.
VARIABLES = {"$__rate_interval": "1m", "$__range": "5m", "$__interval": "15s"}
_TEMPLATE = re.compile(r"\$\{?(\w+)(?::\w+)?\}?")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_MATCHERS = re.compile(r"\{[^}]*\}")
_IDENTIFIER = re.compile(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b")
_PROMQL_WORDS = frozenset(
    {"sum", "max", "min", "avg", "count", "rate", "increase", "irate", "histogram_quantile", "timestamp"}
    | {"topk", "by", "without", "on", "ignoring", "group_left", "group_right"}
    | {"and", "or", "unless", "bool", "offset"}
)


def dashboards() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, json.loads(path.read_text())) for path in sorted(DASHBOARDS.glob("*.json"))]


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # a collapsed row's


def prometheus_queries() -> list[tuple[str, str, str]]:
    """(dashboard file, panel title, expr) of every Prometheus target."""
    found = []
    for name, dashboard in dashboards():
        for panel in panels(dashboard):
            for target in panel.get("targets", []):
                if target.get("datasource", panel.get("datasource", {})).get("type") == "prometheus":
                    found.append((name, panel["title"], target["expr"]))
    return found


def filled(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return _TEMPLATE.sub(".*", expr)


def metric_names(expr: str) -> set[str]:
    """The metric names an expression reads (labels and functions left out)."""
    bare = _MATCHERS.sub("", _GROUPING.sub("", filled(expr)))
    bare = re.sub(r"\[[^\]]*\]", "", bare)
    return {word for word in _IDENTIFIER.findall(bare) if word not in _PROMQL_WORDS and not word[0].isdigit()}
