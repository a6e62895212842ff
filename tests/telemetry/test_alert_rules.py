"""The shipped Prometheus rules (telemetry/rules/): valid, unit-tested with promtool (every
alert fires in a test and is quiet in another), reading only metrics the gateway exports, and
each alert with its runbook entry."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.harness import installed_tool
from tests.telemetry.dashboards import metric_names
from tests.telemetry.test_dashboards import _exported

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "telemetry" / "rules" / "tollgate.rules.yaml"
RULE_TESTS = Path(__file__).parent / "rules" / "tollgate.rules.test.yaml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"


def promtool() -> str:
    return installed_tool("promtool", "apt-get install -y prometheus; .ci/run does")


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


def test_promtool_accepts_the_rules() -> None:
    result = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rules_unit_tests_pass() -> None:
    result = subprocess.run(
        [promtool(), "test", "rules", RULE_TESTS.name],
        capture_output=True,
        text=True,
        check=False,
        cwd=RULE_TESTS.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_tested_firing_and_quiet() -> None:
    cases = [
        case
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", ())
    ]
    fired = {case["alertname"] for case in cases if case.get("exp_alerts")}
    quiet = {case["alertname"] for case in cases if not case.get("exp_alerts")}
    names = {rule["alert"] for rule in alerts()}
    assert names - fired == set()
    assert names - quiet == set()


def test_rules_read_only_metrics_the_gateway_exports() -> None:
    exported = _exported()
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    for rule in rules():
        read = metric_names(rule["expr"]) - recorded
        assert read <= exported, (rule.get("alert") or rule.get("record"), read - exported)


def test_every_alert_has_a_runbook_entry() -> None:
    headings = {
        re.sub(r"[^a-z0-9-]", "", line.lstrip("#").strip().lower().replace(" ", "-"))
        for line in RUNBOOKS.read_text().splitlines()
        if line.startswith("### ")
    }
    for rule in alerts():
        anchor = rule["annotations"]["runbook"].split("#", 1)[1]
        assert anchor == rule["alert"].lower()
        assert anchor in headings, rule["alert"]
        assert rule["labels"]["severity"] in {"page", "ticket"}


def test_prometheus_loads_the_rules() -> None:
    config = yaml.safe_load((ROOT / "telemetry" / "prometheus.yml").read_text())
    assert "rules/tollgate.rules.yaml" in config["rule_files"]
