"""The label stage (workflow and priority from headers or the key's defaults) and the
routing parts of the config, with the errors they give."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.config import GatewayConfig
from gateway.errors import InvalidRequest
from gateway.exchange import Endpoint, Exchange, Principal, Tenant
from gateway.stages.label import Label

PLAIN = Principal(Tenant("acme"), "k1")
BATCH = Principal(
    Tenant("acme"), "k2", "nightly", default_workflow="extraction", default_priority="background"
)


def labelled(headers: dict[str, str], principal: Principal = PLAIN) -> Exchange:
    exchange = Exchange("r", Endpoint.CHAT, 0.0, 30.0, headers, b"")
    exchange.principal = principal
    asyncio.run(Label(["extraction", "chat"])(exchange))
    return exchange


@pytest.mark.parametrize(
    ("headers", "principal", "workflow", "priority"),
    [
        ({}, PLAIN, "default", "normal"),
        ({}, BATCH, "extraction", "background"),
        ({"x-workflow": "chat", "x-priority": "CRITICAL"}, BATCH, "chat", "critical"),
        ({"x-workflow": "Jane's secret project"}, PLAIN, "other", "normal"),
        ({"x-workflow": "  ", "x-priority": " "}, BATCH, "extraction", "background"),
    ],
)
def test_workflow_and_priority_come_from_headers_else_the_keys_defaults(
    headers: dict[str, str], principal: Principal, workflow: str, priority: str
) -> None:
    exchange = labelled(headers, principal)
    assert (exchange.workflow, exchange.priority) == (workflow, priority)


@pytest.mark.parametrize("value", ["urgent", "1", "critical,normal"])
def test_a_priority_that_is_not_one_of_the_three_is_a_clear_400(value: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        labelled({"x-priority": value})
    assert caught.value.status == 400
    assert caught.value.code == "invalid_header"
    assert caught.value.param == "x-priority"


def config(**overrides: Any) -> GatewayConfig:
    data: dict[str, Any] = {
        "upstreams": {"local": {"kind": "openai_compat", "base_url": "http://127.0.0.1:9/v1"}},
        "models": {"chat": [{"upstream": "local", "model": "m"}]},
        "tenants": {"acme": {}},
    }
    data.update(overrides)
    return GatewayConfig.model_validate(data)


def test_a_keys_default_workflow_must_be_a_listed_workflow() -> None:
    key = {"tenant": "acme", "hash": "sha256:" + "0" * 64, "workflow": "extraction"}
    with pytest.raises(ValidationError, match=r"is not in routing\.workflows"):
        config(keys=[key])
    assert config(keys=[key], routing={"workflows": ["extraction"]}).keys[0].workflow == "extraction"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"routing": {"workflows": ["Has Spaces"]}}, "must match"),
        ({"routing": {"workflows": ["other"]}}, "are taken"),
        ({"routing": {"prompt_families": {"support": "xyz"}}}, "hex digits"),
        ({"routing": {"choose": {"nope": "least_cost"}}}, "is not a model alias"),
        ({"models": {"chat": [{"upstream": "local", "model": "m", "mirror": 10}]}}, "only mirrors"),
        ({"models": {"chat": [{"upstream": "local", "model": "m", "mirror": 10, "weight": 1}]}}, "not both"),
        ({"models": {"chat": [{"upstream": "local", "model": "m", "mirror": 120}]}}, "less than or equal"),
    ],
)
def test_routing_config_errors_name_the_problem(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        config(**overrides)


def test_without_routing_workflows_the_telemetry_list_names_them() -> None:
    listed = config(telemetry={"labels": {"workflows": ["triage"]}})
    assert listed.workflow_names == ["triage"]
    key = {"tenant": "acme", "hash": "sha256:" + "0" * 64, "workflow": "triage"}
    assert config(keys=[key], telemetry={"labels": {"workflows": ["triage"]}}).keys[0].workflow == "triage"
    assert config(
        routing={"workflows": ["chat"]}, telemetry={"labels": {"workflows": ["triage"]}}
    ).workflow_names == ["chat"]
